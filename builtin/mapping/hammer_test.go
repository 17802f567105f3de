package mapping

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/hostd-dev/hostd/runtime/catalog"
	"github.com/hostd-dev/hostd/runtime/wal"
)

type hammerClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *hammerClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}
func (c *hammerClock) After(d time.Duration) <-chan time.Time { return time.After(d) }
func (c *hammerClock) add(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

// ledger records what every acknowledged append was told: logic offset →
// payload, per logic queue.
type ledger struct {
	mu  sync.Mutex
	off map[string]map[uint64]string
}

func (l *ledger) put(vc string, off uint64, payload string) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if prev, dup := l.off[vc][off]; dup {
		return fmt.Errorf("%s offset %d handed out twice: %q and %q", vc, off, prev, payload)
	}
	l.off[vc][off] = payload
	return nil
}

func (l *ledger) get(vc string, off uint64) (string, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	p, ok := l.off[vc][off]
	return p, ok
}

// checkSnapshot checks, on one catalog snapshot, every invariant of the
// topic and of each logic queue's visible sequence: mapping invariants
// (checkTopic), min and max never going back, reads from min to max
// gap-free and each message at the offset its append was told.
func checkSnapshot(ctx context.Context, m *Mapping, topic string, queues int, l *ledger, lastMin, lastMax []uint64) error {
	return m.store.View(ctx, func(r catalog.Reader) error {
		if _, err := loadTopic(r, topic, nil); err != nil {
			return err
		}
		for q := 0; q < queues; q++ {
			vc := VChannel(topic, q)
			qv, err := m.view(ctx, r, topic, q)
			if err != nil {
				return err
			}
			if qv.min < lastMin[q] || qv.max < lastMax[q] || qv.min > qv.max {
				return fmt.Errorf("%s: bounds [%d, %d) after [%d, %d)", vc, qv.min, qv.max, lastMin[q], lastMax[q])
			}
			lastMin[q], lastMax[q] = qv.min, qv.max
			for from := qv.min; from < qv.max; {
				msgs, err := m.readView(ctx, r, vc, topic, q, from, 64)
				if err != nil {
					return fmt.Errorf("%s: read at %d of [%d, %d): %w", vc, from, qv.min, qv.max, err)
				}
				if len(msgs) == 0 {
					return fmt.Errorf("%s: read at %d < max %d returned nothing (gap)", vc, from, qv.max)
				}
				for _, msg := range msgs {
					if msg.Offset != from {
						return fmt.Errorf("%s: expected offset %d, read %d", vc, from, msg.Offset)
					}
					if want, ok := l.get(vc, from); ok && want != string(msg.Payload) {
						return fmt.Errorf("%s: offset %d holds %q, its append was told %q (renumbered)", vc, from, msg.Payload, want)
					}
					from++
				}
			}
		}
		return nil
	})
}

// TestHammerRetentionRemapAppendGroups runs retention passes (by age and
// by bytes, on a clock that jumps ahead), remaps between three brokers,
// appends and group commits on one topic at once, under -race. After every
// step of every actor and at the end the invariants hold: no logic offset
// is handed out twice, lost, renumbered, or leaves a gap; min and max
// never go back; group offsets survive everything; the catalog loads.
//
// Retention does not take the topic's resource key (a builtin cannot
// import the lock service, and it runs outside any broadcast); it relies
// on the WAL's trims never conflicting with appends or seals, and on its
// segment drop's optimistic check on the queue record. This test is the
// evidence that this is enough.
func TestHammerRetentionRemapAppendGroups(t *testing.T) {
	ctx := context.Background()
	o := catalog.DefaultOptions(t.TempDir())
	o.SyncWrites, o.GCInterval = false, 0
	db, err := catalog.Open(o)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	clk := &hammerClock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	w, err := wal.Open(ctx, wal.Config{Store: db, Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	m, err := Open(ctx, Config{Store: db, WAL: w, Clock: clk, HoldTimeout: time.Second,
		Brokers: []Broker{{Name: "a"}, {Name: "b"}, {Name: "c"}}})
	if err != nil {
		t.Fatal(err)
	}
	const (
		topic     = "t"
		queues    = 2
		appenders = 4
		perWriter = 120
		remaps    = 12
	)
	if _, err := m.Apply(ctx, Change{Kind: KindCreate, Topic: topic, Queues: queues, Brokers: []string{"a"},
		Retention: &Retention{MaxAge: 3 * time.Second, MaxBytes: 400}}); err != nil {
		t.Fatal(err)
	}
	l := &ledger{off: map[string]map[uint64]string{}}
	for q := 0; q < queues; q++ {
		l.off[VChannel(topic, q)] = map[uint64]string{}
	}

	var (
		wg      sync.WaitGroup
		failMu  sync.Mutex
		failure error
		done    = make(chan struct{}) // appenders finished
	)
	fail := func(err error) {
		failMu.Lock()
		if failure == nil {
			failure = err
		}
		failMu.Unlock()
	}
	failed := func() bool {
		failMu.Lock()
		defer failMu.Unlock()
		return failure != nil
	}
	// Every actor checks the invariants after each of its steps, each
	// with its own view of the bounds.
	checker := func() func() error {
		lastMin, lastMax := make([]uint64, queues), make([]uint64, queues)
		return func() error { return checkSnapshot(ctx, m, topic, queues, l, lastMin, lastMax) }
	}

	var appWG sync.WaitGroup
	for g := 0; g < appenders; g++ {
		appWG.Add(1)
		go func() {
			defer appWG.Done()
			check := checker()
			vc := VChannel(topic, g%queues)
			var last uint64
			for i := 0; i < perWriter && !failed(); i++ {
				payload := fmt.Sprintf("w%d-%d", g, i)
				pos, err := m.Append(ctx, vc, []wal.Record{{Payload: []byte(payload)}})
				if err != nil {
					fail(fmt.Errorf("append %s: %w", payload, err))
					return
				}
				if i > 0 && pos[0].Offset <= last {
					fail(fmt.Errorf("writer %d: offset %d after %d", g, pos[0].Offset, last))
					return
				}
				last = pos[0].Offset
				if err := l.put(vc, pos[0].Offset, payload); err != nil {
					fail(err)
					return
				}
				if i%10 == 0 {
					if err := check(); err != nil {
						fail(fmt.Errorf("after append %s: %w", payload, err))
						return
					}
				}
			}
		}()
	}
	go func() { appWG.Wait(); close(done) }()

	wg.Add(1)
	go func() { // remaps A→B→C→… with the invariants after each
		defer wg.Done()
		check := checker()
		for i := 0; i < remaps && !failed(); i++ {
			target := []string{"b", "c", "a"}[i%3]
			if _, err := m.Apply(ctx, Change{Kind: KindRemap, Topic: topic, Brokers: []string{target}}); err != nil {
				fail(fmt.Errorf("remap %d to %s: %w", i, target, err))
				return
			}
			if err := check(); err != nil {
				fail(fmt.Errorf("after remap %d: %w", i, err))
				return
			}
			select {
			case <-done:
			case <-time.After(2 * time.Millisecond):
			}
		}
	}()

	wg.Add(1)
	go func() { // retention passes on a clock that moves 1s per pass
		defer wg.Done()
		check := checker()
		for !failed() {
			if _, err := m.ApplyRetention(ctx); err != nil {
				fail(fmt.Errorf("retention: %w", err))
				return
			}
			if err := check(); err != nil {
				fail(fmt.Errorf("after retention: %w", err))
				return
			}
			clk.add(time.Second)
			select {
			case <-done:
				return
			default:
			}
		}
	}()

	wg.Add(1)
	go func() { // another topic is created, filled, remapped and deleted over and over
		defer wg.Done()
		for i := 0; !failed(); i++ {
			if _, err := m.Apply(ctx, Change{Kind: KindCreate, Topic: "churn", Queues: 1, Brokers: []string{"b"},
				Retention: &Retention{MaxBytes: 10}}); err != nil {
				fail(fmt.Errorf("churn create %d: %w", i, err))
				return
			}
			for j := 0; j < 5; j++ {
				if _, err := m.Append(ctx, "churn/0", []wal.Record{{Payload: []byte("0123456789")}}); err != nil {
					fail(fmt.Errorf("churn append: %w", err))
					return
				}
			}
			if err := m.CommitOffset(ctx, "g", "churn/0", 5); err != nil {
				fail(fmt.Errorf("churn commit: %w", err))
				return
			}
			if _, err := m.Apply(ctx, Change{Kind: KindRemap, Topic: "churn", Brokers: []string{"c"}}); err != nil {
				fail(fmt.Errorf("churn remap %d: %w", i, err))
				return
			}
			if _, err := m.Apply(ctx, Change{Kind: KindDelete, Topic: "churn"}); err != nil {
				fail(fmt.Errorf("churn delete %d: %w", i, err))
				return
			}
			select {
			case <-done:
				return
			default:
			}
		}
	}()

	committed := make([]uint64, queues)
	wg.Add(1)
	go func() { // a consumer group follows each queue's max
		defer wg.Done()
		for i := 0; !failed(); i++ {
			q := i % queues
			vc := VChannel(topic, q)
			_, max, err := m.Bounds(ctx, vc)
			if err != nil {
				fail(err)
				return
			}
			if max < committed[q] {
				fail(fmt.Errorf("%s: max %d below committed %d", vc, max, committed[q]))
				return
			}
			if err := m.CommitOffset(ctx, "g", vc, max); err != nil {
				fail(fmt.Errorf("group commit %s@%d: %w", vc, max, err))
				return
			}
			committed[q] = max
			for p := 0; p < queues; p++ {
				got, err := m.GroupOffset(ctx, "g", VChannel(topic, p))
				if err != nil || (committed[p] > 0 && (!got.Committed || got.Offset != committed[p])) {
					fail(fmt.Errorf("group offset of %s: %+v %v, committed %d", VChannel(topic, p), got, err, committed[p]))
					return
				}
			}
			select {
			case <-done:
				return
			case <-time.After(time.Millisecond):
			}
		}
	}()

	<-done
	wg.Wait()
	if failure != nil {
		t.Fatal(failure)
	}

	// The end: one more retention pass, then every acknowledged offset is
	// accounted for, the retained ones hold their payloads, the remaps
	// and retention really happened, and a fresh Open loads the catalog.
	if _, err := m.ApplyRetention(ctx); err != nil {
		t.Fatal(err)
	}
	if err := checker()(); err != nil {
		t.Fatal(err)
	}
	dropped := false
	for q := 0; q < queues; q++ {
		vc := VChannel(topic, q)
		min, max, err := m.Bounds(ctx, vc)
		if err != nil {
			t.Fatal(err)
		}
		if n := uint64(len(l.off[vc])); n != max {
			t.Fatalf("%s: %d appends acknowledged, max is %d", vc, n, max)
		}
		for off := uint64(0); off < max; off++ {
			if _, ok := l.off[vc][off]; !ok {
				t.Fatalf("%s: offset %d < max %d was never handed out (gap)", vc, off, max)
			}
		}
		if min == 0 {
			t.Fatalf("%s: retention trimmed nothing", vc)
		}
		g, err := m.GroupOffset(ctx, "g", vc)
		if err != nil || g.Offset != committed[q] {
			t.Fatalf("%s: group offset %+v %v, committed %d", vc, g, err, committed[q])
		}
		var qv *qview
		if err := db.View(ctx, func(r catalog.Reader) error { qv, err = m.view(ctx, r, topic, q); return err }); err != nil {
			t.Fatal(err)
		}
		if qv.q.Leader().Gen <= remaps/2 {
			t.Fatalf("%s: leader gen %d after %d remaps", vc, qv.q.Leader().Gen, remaps)
		}
		if qv.q.Segments[0].Gen > 1 {
			dropped = true
		}
	}
	if !dropped {
		t.Fatal("retention never dropped a closed segment")
	}
	if _, err := Open(ctx, Config{Store: db, WAL: w, Brokers: []Broker{{Name: "a"}, {Name: "b"}, {Name: "c"}}}); err != nil {
		t.Fatalf("reopen: %v", err)
	}
	var orphans []string
	if err := db.View(ctx, func(r catalog.Reader) error {
		for _, b := range []string{"a/", "b/", "c/"} {
			qs, err := wal.ListQueues(r, b)
			if err != nil {
				return err
			}
			orphans = append(orphans, qs...)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	ti, err := m.Describe(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	live := map[string]bool{}
	for _, q := range ti.Queues {
		for _, s := range q.Segments {
			live[s.PhysicalQueue] = true
		}
	}
	n := 0
	for _, pq := range orphans {
		if !live[pq] {
			n++
		}
	}
	if n > 1 { // the control topic's queue on "a"
		t.Fatalf("physical queues no segment maps: %v (live %v)", orphans, live)
	}
}

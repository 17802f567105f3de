package mapping_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"github.com/nats-io/nats.go/jetstream"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hostd-dev/hostd/builtin/mapping"
	"github.com/hostd-dev/hostd/internal/natstest"
	"github.com/hostd-dev/hostd/runtime/catalog"
	"github.com/hostd-dev/hostd/runtime/sched"
	"github.com/hostd-dev/hostd/runtime/wal"
	"github.com/hostd-dev/hostd/runtime/wal/jswal"
)

// jsEnv is one nats-server (JetStream on, temp dir) shared by the tests
// of TestOnJetStream; each test dir gets a stream prefix of its own.
type jsEnv struct{ c *natstest.Cluster }

var onJS *jsEnv // set while TestOnJetStream runs

// open opens a jswal Log for dir's queues (the same streams every time
// for one dir) writing with term.
func (j *jsEnv) open(t testing.TB, dir string, term uint64, clk sched.Clock) *jswal.Log {
	t.Helper()
	h := sha256.Sum256([]byte(dir))
	l, err := jswal.Open(context.Background(), jswal.Options{URL: j.c.URL(), StreamPrefix: "T" + hex.EncodeToString(h[:6]),
		Term: term, Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

func openBadger(t testing.TB, dir string) catalog.Store {
	t.Helper()
	o := catalog.DefaultOptions(dir)
	o.GCInterval = 0
	db, err := catalog.Open(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// startJS starts a nats-server for one test (skipped under -short).
func startJS(t *testing.T) *jsEnv {
	t.Helper()
	if testing.Short() {
		t.Skip("starts a nats-server")
	}
	return &jsEnv{c: natstest.Start(t, natstest.Options{})}
}

// TestOnJetStream runs a subset of the mapping's scenario tests with the
// physical queues on JetStream (Config.Log = jswal on a nats-server in
// this process; the catalog stays Badger in a temp dir): scenarios 1-8
// (create and grow, remaps, rejections, appends during remaps, timestamp
// lookup, retention by age), retention by bytes and of the control
// channel, producer idempotency across a restart and its window, topic
// deletion, waits that follow a remap, the control channel through the
// resolver and translation both ways. The writer has no term here (no
// fences); the TestJS* tests below use terms. Tests that corrupt Badger
// records, hammer, use internal hooks or benchmark stay on the embedded
// WAL.
func TestOnJetStream(t *testing.T) {
	onJS = startJS(t)
	defer func() { onJS = nil }()
	for _, tc := range []struct {
		name string
		fn   func(*testing.T)
	}{
		{"Scenario1CreateGrow", TestScenario1CreateGrow},
		{"Scenario2RemapContinues", TestScenario2RemapContinues},
		{"Scenario3RemapChain", TestScenario3RemapChain},
		{"Scenario4RemapSame", TestScenario4RemapSame},
		{"Scenario5Rejections", TestScenario5Rejections},
		{"Scenario6ConcurrentAppendsDuringRemap", TestScenario6ConcurrentAppendsDuringRemap},
		{"Scenario7TimestampLookup", TestScenario7TimestampLookup},
		{"Scenario8Retention", TestScenario8Retention},
		{"RetentionByBytesAndControl", TestRetentionByBytesAndControl},
		{"ProducerIdempotency", TestProducerIdempotency},
		{"ProducerWindow", TestProducerWindow},
		{"DeleteTopic", TestDeleteTopic},
		{"WaitFollowsRemap", TestWaitFollowsRemap},
		{"DirectResolverCompatibleControl", TestDirectResolverCompatibleControl},
		{"TranslateBothWays", TestTranslateBothWays},
	} {
		t.Run(tc.name, tc.fn)
	}
}

// jsMapping opens a Mapping in Log mode on a jswal Log with term over db.
func jsMapping(t *testing.T, j *jsEnv, db catalog.Store, dir string, term uint64, cfg mapping.Config) (*mapping.Mapping, *jswal.Log) {
	t.Helper()
	l := j.open(t, dir, term, cfg.Clock)
	cfg.Store = db
	if cfg.Log == nil {
		cfg.Log = l
	}
	m, err := mapping.Open(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return m, l
}

// readLogic reads vc from its min to its max following the offsets the
// reads return (Log mode may show gaps where the Log keeps records of its
// own) and checks they increase.
func readLogic(t *testing.T, m *mapping.Mapping, vc string) []wal.Message {
	t.Helper()
	min, max, err := m.Bounds(ctx, vc)
	if err != nil {
		t.Fatal(err)
	}
	var out []wal.Message
	for from := min; from < max; {
		msgs, err := m.Read(ctx, vc, from, 5)
		if err != nil {
			t.Fatal(err)
		}
		if len(msgs) == 0 {
			t.Fatalf("%s: read at %d < max %d returned nothing", vc, from, max)
		}
		for _, msg := range msgs {
			if msg.Offset < from {
				t.Fatalf("%s: offset %d after reading from %d", vc, msg.Offset, from)
			}
			from = msg.Offset + 1
			out = append(out, msg)
		}
	}
	return out
}

// Remaps under concurrent appends on JetStream, with a writer term (so
// queues carry fences): every acknowledged append is read back at its
// acknowledged offset (nothing lost, nothing renumbered), once; no closed
// segment holds an entry at or past its end; multi-record batches stay
// in order.
func TestJSRemapUnderConcurrentAppends(t *testing.T) {
	j := startJS(t)
	dir := t.TempDir()
	db := openBadger(t, dir)
	m, l := jsMapping(t, j, db, dir, 1, mapping.Config{Brokers: brokers("a", "b", "c")})
	if _, err := m.Apply(ctx, mapping.Change{Kind: mapping.KindCreate, Topic: "t", Queues: 2, Brokers: []string{"a"}}); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	acked := map[string]uint64{} // payload -> logic offset
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for g := 0; g < 6; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				vc := fmt.Sprintf("t/%d", g%2)
				n := 1 + i%3
				recs := make([]wal.Record, n)
				for k := range recs {
					recs[k] = wal.Record{Payload: []byte(fmt.Sprintf("%d/%d/%d", g, i, k))}
				}
				pos, err := m.Append(ctx, vc, recs)
				if err != nil {
					t.Errorf("append: %v", err)
					return
				}
				mu.Lock()
				for k, p := range pos {
					if k > 0 && p.Offset <= pos[k-1].Offset {
						t.Errorf("batch out of order: %+v", pos)
					}
					acked[vc+"|"+string(recs[k].Payload)] = p.Offset
				}
				mu.Unlock()
			}
		}()
	}
	for _, b := range []string{"b", "c", "a", "b", "c"} {
		time.Sleep(40 * time.Millisecond)
		if _, err := m.Apply(ctx, mapping.Change{Kind: mapping.KindRemap, Topic: "t", Brokers: []string{b}}); err != nil {
			t.Fatal(err)
		}
	}
	close(stop)
	wg.Wait()
	seen := map[string]bool{}
	for q := 0; q < 2; q++ {
		vc := fmt.Sprintf("t/%d", q)
		last := map[string]int{}
		for _, msg := range readLogic(t, m, vc) {
			key := vc + "|" + string(msg.Payload)
			if seen[key] {
				t.Fatalf("%s read twice", key)
			}
			seen[key] = true
			if off, ok := acked[key]; ok && off != msg.Offset {
				t.Fatalf("%s acknowledged at %d, read at %d (renumbered)", key, off, msg.Offset)
			}
			var g, i, k int
			fmt.Sscanf(string(msg.Payload), "%d/%d/%d", &g, &i, &k)
			id := fmt.Sprint(g)
			if prev, ok := last[id]; ok && i*10+k <= prev {
				t.Fatalf("%s: writer %d went back from %d to %d", vc, g, prev, i*10+k)
			}
			last[id] = i*10 + k
		}
		ti, err := m.Describe(ctx, "t")
		if err != nil {
			t.Fatal(err)
		}
		segs := ti.Queues[q].Segments
		if len(segs) < 3 {
			t.Fatalf("%s: remaps did not happen: %+v", vc, segs)
		}
		for _, s := range segs {
			if !s.Closed() {
				continue
			}
			b, err := l.Bounds(ctx, s.PhysicalQueue)
			if err != nil {
				t.Fatal(err)
			}
			ents, err := l.Read(ctx, s.PhysicalQueue, b.Min, 100000)
			if err != nil {
				t.Fatal(err)
			}
			for _, e := range ents {
				if e.Offset >= *s.EndOffset {
					t.Fatalf("%s: entry at %d past the closed end %d of %s", vc, e.Offset, *s.EndOffset, s.PhysicalQueue)
				}
			}
		}
	}
	for key := range acked {
		if !seen[key] {
			t.Fatalf("acknowledged %s lost", key)
		}
	}
	if len(seen) != len(acked) {
		t.Fatalf("read %d records, acknowledged %d", len(seen), len(acked))
	}
}

// A new writer term fences the leader in the middle of its segment: the
// fence takes an offset, which stays a gap in the logic offsets. Reads
// skip it (from the gap too), bounds, waits, group offsets, time lookup
// and a remap after it stay consistent.
func TestJSFenceInMiddleOfSegment(t *testing.T) {
	j := startJS(t)
	dir := t.TempDir()
	db := openBadger(t, dir)
	m1, _ := jsMapping(t, j, db, dir, 1, mapping.Config{Brokers: brokers("a", "b")})
	if _, err := m1.Apply(ctx, mapping.Change{Kind: mapping.KindCreate, Topic: "t", Queues: 1, Brokers: []string{"a"}}); err != nil {
		t.Fatal(err)
	}
	var pos []wal.Position
	for i := 0; i < 3; i++ {
		p, err := m1.Append(ctx, "t/0", []wal.Record{{Payload: []byte(fmt.Sprint("x", i))}})
		if err != nil {
			t.Fatal(err)
		}
		pos = append(pos, p...)
	}
	if pos[0].Offset != 0 || pos[2].Offset != 2 {
		t.Fatalf("first writer's offsets %+v: the new segment's own fence must not take a logic offset", pos)
	}
	// Failover: a second mapping, its Log at term 2, on the same catalog.
	m2, _ := jsMapping(t, j, db, dir, 2, mapping.Config{Brokers: brokers("a", "b")})
	for i := 0; i < 3; i++ {
		p, err := m2.Append(ctx, "t/0", []wal.Record{{Payload: []byte(fmt.Sprint("y", i))}})
		if err != nil {
			t.Fatal(err)
		}
		pos = append(pos, p...)
	}
	if pos[3].Offset != 4 || pos[5].Offset != 6 {
		t.Fatalf("offsets after the new term's fence: %+v (want a gap at 3)", pos)
	}
	// The old writer is fenced.
	if _, err := m1.Append(ctx, "t/0", []wal.Record{{Payload: []byte("late")}}); err == nil {
		t.Fatal("old term appended after the fence")
	}
	min, max, err := m2.Bounds(ctx, "t/0")
	if err != nil || min != 0 || max != 7 {
		t.Fatalf("bounds [%d, %d) %v", min, max, err)
	}
	msgs, err := m2.Read(ctx, "t/0", 3, 10)
	if err != nil || len(msgs) != 3 || msgs[0].Offset != 4 || string(msgs[0].Payload) != "y0" {
		t.Fatalf("read from the gap: %+v %v", msgs, err)
	}
	all := readLogic(t, m2, "t/0")
	if len(all) != 6 {
		t.Fatalf("read %d messages, want 6", len(all))
	}
	for i, msg := range all {
		if msg.Offset != pos[i].Offset || msg.Tick != pos[i].Tick {
			t.Fatalf("message %d at %d tick %d, appended at %d tick %d", i, msg.Offset, msg.Tick, pos[i].Offset, pos[i].Tick)
		}
	}
	if off, err := m2.OffsetForTime(ctx, "t/0", time.Unix(0, int64(pos[3].Tick))); err != nil || off != 4 {
		t.Fatalf("time lookup of y0: %d %v", off, err)
	}
	if err := m2.CommitOffset(ctx, "g", "t/0", 3); err != nil {
		t.Fatal(err)
	}
	if g, err := m2.GroupOffset(ctx, "g", "t/0"); err != nil || g.Lag != 4 {
		t.Fatalf("group %+v %v", g, err)
	}
	wctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	if err := m2.Wait(wctx, "t/0", 7); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("wait at max returned %v", err)
	}
	cancel()
	if _, err := m2.Apply(ctx, mapping.Change{Kind: mapping.KindRemap, Topic: "t", Brokers: []string{"b"}}); err != nil {
		t.Fatal(err)
	}
	p, err := m2.Append(ctx, "t/0", []wal.Record{{Payload: []byte("z")}})
	if err != nil || p[0].Offset != 7 {
		t.Fatalf("append after the remap: %+v %v (want 7: the seal takes no logic offset)", p, err)
	}
	if all = readLogic(t, m2, "t/0"); len(all) != 7 || string(all[6].Payload) != "z" {
		t.Fatalf("read %d after the remap", len(all))
	}
}

// faultLog stores an append (or its first keep records) and then reports
// a failure, as if the process had crashed after the append and before
// the producer window's commit.
type faultLog struct {
	*jswal.Log
	mu   sync.Mutex
	arm  bool
	keep int
	got  []wal.Entry
}

func (f *faultLog) Append(ctx context.Context, q string, recs []wal.Record) ([]wal.Entry, error) {
	f.mu.Lock()
	arm, keep := f.arm, f.keep
	f.arm = false
	f.mu.Unlock()
	if !arm {
		return f.Log.Append(ctx, q, recs)
	}
	if keep > 0 && keep < len(recs) {
		recs = recs[:keep]
	}
	ents, err := f.Log.Append(ctx, q, recs)
	if err != nil {
		return nil, err
	}
	f.mu.Lock()
	f.got = ents
	f.mu.Unlock()
	return nil, errors.New("injected: crashed after the append")
}

// Producer idempotency across a failover: the first mapping (term 1)
// stores a producer's append and "crashes" before committing its window
// (once for a whole batch, once half-way through one); a second mapping
// (its Log at term 2, same catalog) answers the retries with the original
// positions and appends only what is missing, once.
func TestJSProducerFailover(t *testing.T) {
	j := startJS(t)
	dir := t.TempDir()
	db := openBadger(t, dir)
	fl := &faultLog{Log: j.open(t, dir, 1, nil)}
	m1, _ := jsMapping(t, j, db, dir, 1, mapping.Config{Brokers: brokers("a", "b"), Log: fl})
	if _, err := m1.Apply(ctx, mapping.Change{Kind: mapping.KindCreate, Topic: "t", Queues: 1, Brokers: []string{"a"}}); err != nil {
		t.Fatal(err)
	}
	recs := func(tag string, n int) []wal.Record {
		out := make([]wal.Record, n)
		for i := range out {
			out[i] = wal.Record{Payload: []byte(fmt.Sprint(tag, i))}
		}
		return out
	}
	app := func(m *mapping.Mapping, seq uint64, n int) ([]wal.Position, bool, error) {
		return m.AppendOpts(ctx, "t/0", recs(fmt.Sprint("s", seq, "-"), n), mapping.AppendOptions{ProducerID: "p", Seq: seq})
	}
	orig := map[uint64][]wal.Position{}
	for s := uint64(1); s <= 3; s++ {
		p, dup, err := app(m1, s, 2)
		if err != nil || dup {
			t.Fatal(err, dup)
		}
		orig[s] = p
	}
	// Other writers append meanwhile (the scan must skip their records).
	if _, err := m1.Append(ctx, "t/0", recs("other", 2)); err != nil {
		t.Fatal(err)
	}
	fl.arm = true
	if _, _, err := app(m1, 4, 2); err == nil {
		t.Fatal("the injected crash did not fail the append")
	}
	stored := fl.got
	if len(stored) != 2 {
		t.Fatalf("injected append stored %+v", stored)
	}

	m2, l2 := jsMapping(t, j, db, dir, 2, mapping.Config{Brokers: brokers("a", "b")})
	_, max0, _ := m2.Bounds(ctx, "t/0")
	p, dup, err := app(m2, 4, 2)
	if err != nil || !dup || len(p) != 2 || p[0].QueueOffset != stored[0].Offset || p[1].QueueOffset != stored[1].Offset || p[0].Tick != stored[0].Tick {
		t.Fatalf("retry of the in-flight seq after failover: %+v dup=%v %v (stored %+v)", p, dup, err, stored)
	}
	orig[4] = p
	if _, max, _ := m2.Bounds(ctx, "t/0"); max != max0 {
		t.Fatalf("the retry appended: max %d -> %d", max0, max)
	}
	for s := uint64(1); s <= 4; s++ {
		p, dup, err := app(m2, s, 2)
		if err != nil || !dup || p[0].Offset != orig[s][0].Offset || p[1].Offset != orig[s][1].Offset {
			t.Fatalf("retry of seq %d on the new leader: %+v dup=%v %v, first %+v", s, p, dup, err, orig[s])
		}
	}

	// Half a batch stored before the crash (a third mapping, term 3,
	// takes over from the second, which fails the same way).
	fl2 := &faultLog{Log: l2, arm: true, keep: 1}
	m2b, err := mapping.Open(ctx, mapping.Config{Store: db, Log: fl2, Brokers: brokers("a", "b")})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := app(m2b, 5, 3); err == nil {
		t.Fatal("the injected crash did not fail the append")
	}
	first := fl2.got
	m3, _ := jsMapping(t, j, db, dir, 3, mapping.Config{Brokers: brokers("a", "b")})
	p5, dup, err := app(m3, 5, 3)
	if err != nil || dup || len(p5) != 3 || p5[0].QueueOffset != first[0].Offset {
		t.Fatalf("retry of a half-stored batch: %+v dup=%v %v (stored %+v)", p5, dup, err, first)
	}
	again, dup, err := app(m3, 5, 3)
	if err != nil || !dup {
		t.Fatalf("second retry: %v %v", dup, err)
	}
	for i := range p5 {
		if again[i].Offset != p5[i].Offset {
			t.Fatalf("second retry answered %+v, first %+v", again, p5)
		}
	}
	msgs := readLogic(t, m3, "t/0")
	count := map[string]int{}
	for _, msg := range msgs {
		count[string(msg.Payload)]++
	}
	for k, n := range count {
		if n != 1 {
			t.Fatalf("%q appears %d times", k, n)
		}
	}
	for _, want := range []string{"s4-0", "s4-1", "s5-0", "s5-1", "s5-2"} {
		if count[want] != 1 {
			t.Fatalf("%q appears %d times in %v", want, count[want], count)
		}
	}
	// The next seq appends after everything.
	p6, dup, err := app(m3, 6, 1)
	if err != nil || dup || p6[0].Offset <= p5[2].Offset {
		t.Fatalf("next seq: %+v %v %v", p6, dup, err)
	}
}

// A queue no topic references is swept by retention: one created on the
// Log directly (a plan of a crashed process), and one created by a plan
// that never committed, once its grace has passed.
func TestJSOrphanQueueSwept(t *testing.T) {
	j := startJS(t)
	dir := t.TempDir()
	db := openBadger(t, dir)
	clk := &fakeClock{now: time.Now()}
	m, l := jsMapping(t, j, db, dir, 1, mapping.Config{Brokers: brokers("a", "b"), Clock: clk})
	if _, err := m.Apply(ctx, mapping.Change{Kind: mapping.KindCreate, Topic: "t", Queues: 2}); err != nil {
		t.Fatal(err)
	}
	if err := l.Create(ctx, "b/999999"); err != nil {
		t.Fatal(err)
	}
	var plan *mapping.Plan
	err := db.View(ctx, func(r catalog.Reader) error {
		var err error
		plan, err = m.PlanChange(ctx, r, mapping.Change{Kind: mapping.KindCreate, Topic: "never", Queues: 1, Brokers: []string{"a"}})
		return err
	})
	if err != nil || len(plan.Created) != 1 {
		t.Fatalf("plan %+v %v", plan, err)
	}
	pending := plan.Created[0]
	rep, err := m.ApplyRetention(ctx)
	if err != nil || len(rep.Orphaned) != 1 || rep.Orphaned[0] != "b/999999" {
		t.Fatalf("first sweep %+v %v", rep, err)
	}
	clk.Add(time.Hour)
	rep, err = m.ApplyRetention(ctx)
	if err != nil || len(rep.Orphaned) != 1 || rep.Orphaned[0] != pending {
		t.Fatalf("sweep after the grace %+v %v (pending %s)", rep, err, pending)
	}
	for _, b := range []string{"a/", "b/"} {
		qs, err := l.Queues(ctx, b)
		if err != nil {
			t.Fatal(err)
		}
		for _, q := range qs {
			if q == "b/999999" || q == pending {
				t.Fatalf("orphan %s left", q)
			}
		}
	}
	ti, err := m.Describe(ctx, "t")
	if err != nil || len(ti.Queues) != 2 {
		t.Fatalf("the topic's queues: %+v %v", ti, err)
	}
	if _, err := m.Append(ctx, "t/1", []wal.Record{{Payload: []byte("x")}}); err != nil {
		t.Fatal(err)
	}
}

// The resolver handed to the broadcast engine: in Log mode not a
// MultiAppender (one vchannel at a time) but a NextHinter, and broadcast
// records carry wal.BroadcastRecordID.
func TestJSResolver(t *testing.T) {
	j := startJS(t)
	dir := t.TempDir()
	db := openBadger(t, dir)
	m, l := jsMapping(t, j, db, dir, 1, mapping.Config{Brokers: brokers("a")})
	r := m.Resolver()
	if _, ok := r.(wal.MultiAppender); ok {
		t.Fatal("the Log-mode resolver is a MultiAppender")
	}
	h, ok := r.(wal.NextHinter)
	if !ok {
		t.Fatal("the Log-mode resolver is not a NextHinter")
	}
	if _, err := m.AppendMulti(ctx, []wal.ChannelRecords{{VChannel: wal.ControlChannel, Recs: []wal.Record{{}}}}, nil); !errors.Is(err, mapping.ErrInvalid) {
		t.Fatalf("AppendMulti in Log mode: %v", err)
	}
	rec := wal.Record{Kind: wal.KindBroadcast, Payload: []byte("b"), Props: map[string]string{"hostd.broadcast.id": "42"}}
	pos, err := r.Append(ctx, wal.ControlChannel, []wal.Record{rec})
	if err != nil {
		t.Fatal(err)
	}
	ents, err := l.Read(ctx, pos[0].Queue, pos[0].QueueOffset, 1)
	if err != nil || len(ents) != 1 || ents[0].ID != wal.BroadcastRecordID(wal.ControlChannel, rec) || ents[0].ID != "42/"+wal.ControlChannel {
		t.Fatalf("stored %+v %v", ents, err)
	}
	if n, err := h.NextHint(ctx, wal.ControlChannel); err != nil || n != pos[0].Offset+1 {
		t.Fatalf("next hint %d %v after offset %d", n, err, pos[0].Offset)
	}
	// WAL mode hands out the mapping itself.
	e := newEnv(t, mapping.Config{})
	if _, ok := e.m.Resolver().(wal.MultiAppender); !ok {
		t.Fatal("the WAL-mode resolver is not a MultiAppender")
	}
}

// noSeal is a Log that cannot seal.
type noSeal struct{ wal.Log }

func TestOpenNeedsExactlyOneOfWALAndLog(t *testing.T) {
	dir := t.TempDir()
	db := openBadger(t, dir)
	w, err := wal.Open(ctx, wal.Config{Store: db})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		cfg  mapping.Config
		want string
	}{
		{"neither", mapping.Config{Store: db}, "neither is set"},
		{"both", mapping.Config{Store: db, WAL: w, Log: w}, "not both"},
		{"no sealer", mapping.Config{Store: db, Log: noSeal{w}}, "cannot seal"},
	} {
		if _, err := mapping.Open(ctx, tc.cfg); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v", tc.name, err)
		}
	}
	// The embedded WAL works as a Log too (no catalog atomicity then).
	m, err := mapping.Open(ctx, mapping.Config{Store: db, Log: w, Brokers: brokers("a", "b")})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.Apply(ctx, mapping.Change{Kind: mapping.KindCreate, Topic: "t", Queues: 1, Brokers: []string{"a"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Append(ctx, "t/0", []wal.Record{{Payload: []byte("x")}, {Payload: []byte("y")}}); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Apply(ctx, mapping.Change{Kind: mapping.KindRemap, Topic: "t", Brokers: []string{"b"}}); err != nil {
		t.Fatal(err)
	}
	p, err := m.Append(ctx, "t/0", []wal.Record{{Payload: []byte("z")}})
	if err != nil || p[0].Offset != 2 {
		t.Fatalf("after remap: %+v %v", p, err)
	}
}

// TestJSPlacementByBrokerLabels: on a 3-server JetStream cluster whose
// servers carry zone tags, each segment's stream is placed by its broker's
// labels, so a topic spread over the brokers has its queues in three
// real zones.
func TestJSPlacementByBrokerLabels(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a 3-server JetStream cluster")
	}
	c := natstest.Start(t, natstest.Options{Servers: 3, Tags: [][]string{{"az:a"}, {"az:b"}, {"az:c"}}})
	j := &jsEnv{c: c}
	dir := t.TempDir()
	db := openBadger(t, dir)
	bs := []mapping.Broker{
		{Name: "b0", Labels: map[string]string{"az": "a"}},
		{Name: "b1", Labels: map[string]string{"az": "b"}},
		{Name: "b2", Labels: map[string]string{"az": "c"}},
	}
	m, _ := jsMapping(t, j, db, dir, 1, mapping.Config{Brokers: bs})
	// balanced puts one queue on each broker (a plugin policy such as
	// zone-spread would choose by the az label instead).
	if _, err := m.Apply(ctx, mapping.Change{Kind: mapping.KindCreate, Topic: "z", Queues: 3}); err != nil {
		t.Fatal(err)
	}
	js, err := jetstream.New(c.Conn(t))
	if err != nil {
		t.Fatal(err)
	}
	zones := map[string]string{} // queue → server tag of its stream's leader
	lister := js.ListStreams(ctx)
	for si := range lister.Info() {
		q := si.Config.Metadata["hostd_queue"]
		broker, _, _ := strings.Cut(q, "/")
		var want string
		for _, b := range bs {
			if b.Name == broker {
				want = "az:" + b.Labels["az"]
			}
		}
		if want == "" {
			t.Errorf("stream of %s: unknown broker", q)
			continue
		}
		if si.Config.Placement == nil || len(si.Config.Placement.Tags) != 1 || si.Config.Placement.Tags[0] != want {
			t.Errorf("stream of %s placed by %+v, want tag %s", q, si.Config.Placement, want)
		}
		if si.Cluster == nil || si.Cluster.Leader == "" {
			t.Errorf("stream of %s has no leader: %+v", q, si.Cluster)
			continue
		}
		zones[q] = si.Cluster.Leader
	}
	if err := lister.Err(); err != nil {
		t.Fatal(err)
	}
	servers := map[string]bool{}
	for _, s := range zones {
		servers[s] = true
	}
	// z's 3 queues (one per broker) and the control channel's (on b0).
	if len(zones) != 4 || len(servers) != 3 {
		t.Fatalf("queues on servers %v, want 4 queues over 3 servers", zones)
	}
}

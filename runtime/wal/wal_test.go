package wal_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/hostd-dev/hostd/runtime/catalog"
	"github.com/hostd-dev/hostd/runtime/wal"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// fakeClock is a settable clock for tick tests.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}
func (c *fakeClock) After(d time.Duration) <-chan time.Time { return time.After(d) }

// countingStore counts commits and fails those selected by fail (fault
// injection only; everything else goes to the real Badger catalog).
type countingStore struct {
	catalog.Store
	commits atomic.Int64
	fail    func(n int64) bool
}

var errInjected = errors.New("injected commit failure")

func (s *countingStore) Commit(ctx context.Context, b *catalog.Batch) (catalog.Version, error) {
	n := s.commits.Add(1)
	if s.fail != nil && s.fail(n) {
		return 0, errInjected
	}
	return s.Store.Commit(ctx, b)
}

func openDB(t testing.TB, dir string) *catalog.DB {
	t.Helper()
	o := catalog.DefaultOptions(dir)
	o.GCInterval = 0
	db, err := catalog.Open(o)
	if err != nil {
		t.Fatal(err)
	}
	return db
}

func openWAL(t testing.TB, store catalog.Store, cfg wal.Config) *wal.WAL {
	t.Helper()
	cfg.Store = store
	w, err := wal.Open(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Close() })
	return w
}

func rec(s string) wal.Record { return wal.Record{Payload: []byte(s)} }

func TestAppendReadBounds(t *testing.T) {
	ctx := context.Background()
	db := openDB(t, t.TempDir())
	defer db.Close()
	w := openWAL(t, db, wal.Config{Queues: []string{"q"}})

	ents, err := w.Append(ctx, "q", []wal.Record{rec("a"), {Payload: []byte("b"), Props: map[string]string{"k": "v", "a": ""}}})
	if err != nil {
		t.Fatal(err)
	}
	if ents[0].Offset != 0 || ents[1].Offset != 1 || ents[1].Tick <= ents[0].Tick {
		t.Fatalf("entries %+v", ents)
	}
	got, err := w.Read(ctx, "q", 0, 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || string(got[0].Payload) != "a" || got[1].Props["k"] != "v" || got[1].Props["a"] != "" || len(got[1].Props) != 2 {
		t.Fatalf("read %+v", got)
	}
	if got[1].Tick != ents[1].Tick {
		t.Fatalf("tick read %d, appended %d", got[1].Tick, ents[1].Tick)
	}
	b, err := w.Bounds(ctx, "q")
	if err != nil || b.Min != 0 || b.Max != 2 || b.Sealed {
		t.Fatalf("bounds %+v %v", b, err)
	}
	if got, err := w.Read(ctx, "q", 2, 10); err != nil || len(got) != 0 {
		t.Fatalf("read at max: %v %v", got, err)
	}
	var re *wal.RangeError
	if _, err := w.Read(ctx, "q", 3, 10); !errors.As(err, &re) || re.Max != 2 || !errors.Is(err, wal.ErrOutOfRange) {
		t.Fatalf("read past max: %v", err)
	}
	if _, err := w.Append(ctx, "nope", []wal.Record{rec("x")}); !errors.Is(err, wal.ErrNoQueue) {
		t.Fatalf("append to missing queue: %v", err)
	}
	if _, err := w.Append(ctx, "q", nil); !errors.Is(err, wal.ErrInvalid) {
		t.Fatalf("empty append: %v", err)
	}
	if _, err := w.Append(ctx, "bad\x00name", []wal.Record{rec("x")}); !errors.Is(err, wal.ErrInvalid) {
		t.Fatalf("bad name: %v", err)
	}
	if err := w.Create(ctx, "q"); !errors.Is(err, wal.ErrExists) {
		t.Fatalf("create twice: %v", err)
	}
}

func TestTooLarge(t *testing.T) {
	db := openDB(t, t.TempDir())
	defer db.Close()
	w := openWAL(t, db, wal.Config{Queues: []string{"q"}, MaxRecordBytes: 100, MaxBatchBytes: 200})
	ctx := context.Background()
	if _, err := w.Append(ctx, "q", []wal.Record{{Payload: make([]byte, 200)}}); !errors.Is(err, wal.ErrTooLarge) {
		t.Fatalf("big record: %v", err)
	}
	if _, err := w.Append(ctx, "q", []wal.Record{{Payload: make([]byte, 80)}, {Payload: make([]byte, 80)}, {Payload: make([]byte, 80)}}); !errors.Is(err, wal.ErrTooLarge) {
		t.Fatalf("big batch: %v", err)
	}
	if m, _ := w.Max(ctx, "q"); m != 0 {
		t.Fatalf("max %d after rejected appends", m)
	}
}

// checkSequence asserts that queue holds exactly offsets 0..n-1 and that
// every call's records are consecutive and in the call's order.
func checkSequence(t *testing.T, w *wal.WAL, queue string, calls [][]wal.Entry, want map[uint64]string) {
	t.Helper()
	ctx := context.Background()
	seen := map[uint64]bool{}
	for _, ents := range calls {
		for i, e := range ents {
			if seen[e.Offset] {
				t.Fatalf("offset %d handed out twice", e.Offset)
			}
			seen[e.Offset] = true
			if i > 0 && e.Offset != ents[i-1].Offset+1 {
				t.Fatalf("call's offsets not consecutive: %d after %d", e.Offset, ents[i-1].Offset)
			}
		}
	}
	b, err := w.Bounds(ctx, queue)
	if err != nil {
		t.Fatal(err)
	}
	if b.Max != uint64(len(seen)) {
		t.Fatalf("max %d, %d offsets acknowledged", b.Max, len(seen))
	}
	all, err := w.Read(ctx, queue, 0, int(b.Max)+1)
	if err != nil {
		t.Fatal(err)
	}
	var lastTick uint64
	for i, e := range all {
		if e.Offset != uint64(i) {
			t.Fatalf("gap: entry %d has offset %d", i, e.Offset)
		}
		if e.Tick <= lastTick {
			t.Fatalf("tick not increasing at %d", i)
		}
		lastTick = e.Tick
		if want[e.Offset] != string(e.Payload) {
			t.Fatalf("offset %d holds %q, acknowledged %q", e.Offset, e.Payload, want[e.Offset])
		}
	}
}

func hammer(t *testing.T, w *wal.WAL, queue string, goroutines, calls int) ([][]wal.Entry, map[uint64]string, int) {
	var mu sync.Mutex
	var all [][]wal.Entry
	want := map[uint64]string{}
	failed := 0
	var wg sync.WaitGroup
	for g := 0; g < goroutines; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for c := 0; c < calls; c++ {
				n := 1 + (g+c)%3
				recs := make([]wal.Record, n)
				for i := range recs {
					recs[i] = rec(fmt.Sprintf("g%d-c%d-r%d", g, c, i))
				}
				ents, err := w.Append(context.Background(), queue, recs)
				mu.Lock()
				if err != nil {
					if !errors.Is(err, errInjected) {
						t.Errorf("append: %v", err)
					}
					failed++
				} else {
					all = append(all, ents)
					for i, e := range ents {
						want[e.Offset] = string(recs[i].Payload)
					}
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return all, want, failed
}

func TestConcurrentAppendsGapFree(t *testing.T) {
	db := openDB(t, t.TempDir())
	defer db.Close()
	cs := &countingStore{Store: db}
	w := openWAL(t, cs, wal.Config{Queues: []string{"q"}})
	before := cs.commits.Load()
	calls, want, _ := hammer(t, w, "q", 32, 20)
	checkSequence(t, w, "q", calls, want)
	commits := cs.commits.Load() - before
	if commits >= int64(len(calls)) {
		t.Fatalf("%d calls took %d commits: appends were not grouped", len(calls), commits)
	}
	t.Logf("%d calls in %d commits", len(calls), commits)
}

func TestFailedCommitsAssignNothing(t *testing.T) {
	db := openDB(t, t.TempDir())
	defer db.Close()
	cs := &countingStore{Store: db}
	w := openWAL(t, cs, wal.Config{Queues: []string{"q"}})
	cs.fail = func(n int64) bool { return n%3 == 0 }
	calls, want, failed := hammer(t, w, "q", 16, 20)
	if failed == 0 {
		t.Fatal("no append failed: fault injection not exercised")
	}
	cs.fail = nil
	checkSequence(t, w, "q", calls, want)
}

func TestRestartKeepsOffsetsAndTicks(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	future := &fakeClock{now: time.Now().Add(time.Hour)}
	db := openDB(t, dir)
	w := openWAL(t, db, wal.Config{Queues: []string{"q", "r"}, Clock: future})
	e1, err := w.Append(ctx, "q", []wal.Record{rec("a"), rec("b")})
	if err != nil {
		t.Fatal(err)
	}
	e2, err := w.Append(ctx, "r", []wal.Record{rec("c")})
	if err != nil {
		t.Fatal(err)
	}
	if e2[0].Tick <= e1[1].Tick {
		t.Fatal("ticks do not increase across queues")
	}
	w.Close()
	db.Close()

	// Restart with a clock that went back two hours.
	past := &fakeClock{now: future.now.Add(-2 * time.Hour)}
	db = openDB(t, dir)
	defer db.Close()
	w = openWAL(t, db, wal.Config{Clock: past})
	e3, err := w.Append(ctx, "q", []wal.Record{rec("d")})
	if err != nil {
		t.Fatal(err)
	}
	if e3[0].Offset != 2 {
		t.Fatalf("offset after restart %d, want 2", e3[0].Offset)
	}
	if e3[0].Tick <= e2[0].Tick {
		t.Fatalf("tick after restart %d <= %d", e3[0].Tick, e2[0].Tick)
	}
}

func TestSealStopsAppends(t *testing.T) {
	ctx := context.Background()
	db := openDB(t, t.TempDir())
	defer db.Close()
	w := openWAL(t, db, wal.Config{Queues: []string{"q"}})
	if _, err := w.Append(ctx, "q", []wal.Record{rec("a"), rec("b")}); err != nil {
		t.Fatal(err)
	}
	var seal wal.Seal
	var b catalog.Batch
	err := db.View(ctx, func(r catalog.Reader) error {
		var err error
		seal, b.Ops, b.Checks, err = wal.SealOps(r, "q")
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	// An append after the snapshot makes the seal conflict.
	if _, err := w.Append(ctx, "q", []wal.Record{rec("c")}); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Commit(ctx, &b); !errors.Is(err, catalog.ErrConflict) {
		t.Fatalf("stale seal committed: %v", err)
	}
	err = db.View(ctx, func(r catalog.Reader) error {
		var err error
		seal, b.Ops, b.Checks, err = wal.SealOps(r, "q")
		return err
	})
	if err != nil || seal.End != 3 {
		t.Fatalf("seal %+v %v", seal, err)
	}
	if _, err := db.Commit(ctx, &b); err != nil {
		t.Fatal(err)
	}
	// Without Changed the appender learns of the seal from its check.
	if _, err := w.Append(ctx, "q", []wal.Record{rec("d")}); !errors.Is(err, wal.ErrSealed) {
		t.Fatalf("append after seal: %v", err)
	}
	w.Changed("q")
	if err := w.Wait(ctx, "q", 3); !errors.Is(err, wal.ErrSealed) {
		t.Fatalf("wait past seal: %v", err)
	}
	if m, _ := w.Max(ctx, "q"); m != 3 {
		t.Fatalf("max %d after seal", m)
	}
}

func TestWaitLongPoll(t *testing.T) {
	ctx := context.Background()
	db := openDB(t, t.TempDir())
	defer db.Close()
	w := openWAL(t, db, wal.Config{Queues: []string{"q"}})
	done := make(chan error, 1)
	go func() { done <- w.Wait(ctx, "q", 0) }()
	select {
	case err := <-done:
		t.Fatalf("wait returned before any append: %v", err)
	case <-time.After(30 * time.Millisecond):
	}
	if _, err := w.Append(ctx, "q", []wal.Record{rec("a")}); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("waiter not woken by append")
	}
	cctx, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	defer cancel()
	if err := w.Wait(cctx, "q", 1); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("wait with deadline: %v", err)
	}
}

func TestTrimRetentionHelpers(t *testing.T) {
	ctx := context.Background()
	db := openDB(t, t.TempDir())
	defer db.Close()
	w := openWAL(t, db, wal.Config{Queues: []string{"q"}, TrimChunk: 3})
	var ents []wal.Entry
	for i := 0; i < 10; i++ {
		e, err := w.Append(ctx, "q", []wal.Record{{Payload: make([]byte, 84)}}) // 100 bytes counted
		if err != nil {
			t.Fatal(err)
		}
		ents = append(ents, e...)
	}
	err := db.View(ctx, func(r catalog.Reader) error {
		if o, err := wal.OffsetAtTick(r, "q", ents[4].Tick); err != nil || o != 4 {
			return fmt.Errorf("OffsetAtTick = %d, %v", o, err)
		}
		if o, err := wal.OffsetAtTick(r, "q", ents[4].Tick+1); err != nil || o != 5 {
			return fmt.Errorf("OffsetAtTick+1 = %d, %v", o, err)
		}
		if o, err := wal.OffsetKeepingBytes(r, "q", 350); err != nil || o != 7 {
			return fmt.Errorf("OffsetKeepingBytes = %d, %v", o, err)
		}
		if n, err := wal.RetainedBytes(r, "q"); err != nil || n != 1000 {
			return fmt.Errorf("RetainedBytes = %d, %v", n, err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if m, err := w.Trim(ctx, "q", 7); err != nil || m != 7 {
		t.Fatalf("trim: %d %v", m, err)
	}
	if _, err := w.Read(ctx, "q", 6, 1); !errors.Is(err, wal.ErrOutOfRange) {
		t.Fatalf("read below min: %v", err)
	}
	got, err := w.Read(ctx, "q", 7, 10)
	if err != nil || len(got) != 3 || got[0].Offset != 7 {
		t.Fatalf("read after trim: %v %v", got, err)
	}
	if m, err := w.Trim(ctx, "q", 100); err != nil || m != 10 {
		t.Fatalf("trim past max: %d %v", m, err)
	}
	e, err := w.Append(ctx, "q", []wal.Record{rec("x")})
	if err != nil || e[0].Offset != 10 {
		t.Fatalf("append after full trim: %v %v", e, err)
	}
}

func TestDeleteQueue(t *testing.T) {
	ctx := context.Background()
	db := openDB(t, t.TempDir())
	defer db.Close()
	w := openWAL(t, db, wal.Config{Queues: []string{"q", "q2"}, TrimChunk: 2})
	for i := 0; i < 5; i++ {
		if _, err := w.Append(ctx, "q", []wal.Record{rec("a")}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := w.Append(ctx, "q2", []wal.Record{rec("b")}); err != nil {
		t.Fatal(err)
	}
	if err := w.Delete(ctx, "q"); err != nil {
		t.Fatal(err)
	}
	if _, err := w.Append(ctx, "q", []wal.Record{rec("a")}); !errors.Is(err, wal.ErrNoQueue) {
		t.Fatalf("append to deleted: %v", err)
	}
	if qs, _ := w.Queues(ctx, ""); len(qs) != 1 || qs[0] != "q2" {
		t.Fatalf("queues %v", qs)
	}
	n := 0
	_ = db.View(ctx, func(r catalog.Reader) error {
		return r.Scan([]byte("wal/e/q\x00"), []byte("wal/e/q\x01"), func(catalog.KV) error { n++; return nil })
	})
	if n != 0 {
		t.Fatalf("%d entries left after delete", n)
	}
	if got, err := w.Read(ctx, "q2", 0, 10); err != nil || len(got) != 1 {
		t.Fatalf("other queue damaged: %v %v", got, err)
	}
}

func TestCanceledAppendNotApplied(t *testing.T) {
	db := openDB(t, t.TempDir())
	defer db.Close()
	w := openWAL(t, db, wal.Config{Queues: []string{"q"}})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := w.Append(ctx, "q", []wal.Record{rec("a")}); !errors.Is(err, context.Canceled) {
		t.Fatalf("canceled append: %v", err)
	}
	if m, _ := w.Max(context.Background(), "q"); m != 0 {
		t.Fatalf("canceled append applied: max %d", m)
	}
}

func TestDirectResolver(t *testing.T) {
	ctx := context.Background()
	db := openDB(t, t.TempDir())
	defer db.Close()
	w := openWAL(t, db, wal.Config{})
	var r wal.Resolver
	d, err := wal.NewDirect(ctx, w)
	if err != nil {
		t.Fatal(err)
	}
	r = d
	if err := r.Check(ctx, wal.ControlChannel); err != nil {
		t.Fatal(err)
	}
	if err := r.Check(ctx, "db/1"); !errors.Is(err, wal.ErrNoChannel) {
		t.Fatalf("missing vchannel: %v", err)
	}
	pos, err := r.Append(ctx, wal.ControlChannel, []wal.Record{rec("m")})
	if err != nil || pos[0].Offset != 0 || pos[0].Queue != wal.ControlChannel || pos[0].Tick == 0 {
		t.Fatalf("append: %+v %v", pos, err)
	}
	msgs, err := r.Read(ctx, wal.ControlChannel, 0, 5)
	if err != nil || len(msgs) != 1 || msgs[0].Tick != pos[0].Tick {
		t.Fatalf("read: %+v %v", msgs, err)
	}
	if _, err := r.Append(ctx, "db/1", []wal.Record{rec("m")}); !errors.Is(err, wal.ErrNoChannel) {
		t.Fatalf("append to missing vchannel: %v", err)
	}
}

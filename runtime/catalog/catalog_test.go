package catalog

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) != "" {
		seqChild()
		return
	}
	goleak.VerifyTestMain(m)
}

func openTest(t *testing.T, mut ...func(*Options)) *DB {
	t.Helper()
	o := DefaultOptions(t.TempDir())
	o.MemTableSize = 8 << 20 // fast to open; the default is for production
	for _, f := range mut {
		f(&o)
	}
	db, err := Open(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

func get(t *testing.T, db Store, key string) ([]byte, Version, error) {
	t.Helper()
	var (
		v   []byte
		ver Version
	)
	err := db.View(context.Background(), func(r Reader) error {
		var err error
		v, ver, err = r.Get([]byte(key))
		return err
	})
	return v, ver, err
}

func put(k, v string) Op { return Op{Key: []byte(k), Value: []byte(v)} }

func TestCommitAndView(t *testing.T) {
	ctx := context.Background()
	db := openTest(t)
	v1, err := db.Commit(ctx, &Batch{Ops: []Op{put("a/1", "x"), put("a/2", "y")}})
	if err != nil {
		t.Fatal(err)
	}
	val, ver, err := get(t, db, "a/1")
	if err != nil || string(val) != "x" || ver != v1 {
		t.Fatalf("get a/1 = %q %d %v, want x %d", val, ver, err, v1)
	}
	v2, err := db.Commit(ctx, &Batch{Checks: []Check{{Key: []byte("a/1"), Version: v1}}, Ops: []Op{{Key: []byte("a/1"), Delete: true}}})
	if err != nil || v2 <= v1 {
		t.Fatalf("delete: %d %v", v2, err)
	}
	if _, _, err := get(t, db, "a/1"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("after delete: %v", err)
	}
	var keys []string
	err = db.View(ctx, func(r Reader) error {
		return r.Scan([]byte("a/"), []byte("a0"), func(kv KV) error {
			keys = append(keys, string(kv.Key)+"="+string(kv.Value))
			return nil
		})
	})
	if err != nil || strings.Join(keys, ",") != "a/2=y" {
		t.Fatalf("scan = %v %v", keys, err)
	}
	// Stale check fails and changes nothing.
	_, err = db.Commit(ctx, &Batch{Checks: []Check{{Key: []byte("a/2"), Version: v1 - 1}}, Ops: []Op{put("a/3", "z")}})
	if !errors.Is(err, ErrConflict) {
		t.Fatalf("stale check: %v", err)
	}
	if _, _, err := get(t, db, "a/3"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("conflicting batch applied: %v", err)
	}
}

func TestInvalidBatches(t *testing.T) {
	ctx := context.Background()
	db := openTest(t)
	cases := []struct {
		name string
		b    *Batch
		want error
	}{
		{"nil", nil, ErrInvalid},
		{"empty key", &Batch{Ops: []Op{put("", "x")}}, ErrInvalid},
		{"sys namespace", &Batch{Ops: []Op{put("sys/format", "x")}}, ErrInvalid},
		{"badger prefix", &Batch{Ops: []Op{put("!badger!x", "x")}}, ErrInvalid},
		{"value too large", &Batch{Ops: []Op{{Key: []byte("k"), Value: make([]byte, 1<<20+1)}}}, ErrTooLarge},
		{"key too large", &Batch{Ops: []Op{{Key: bytes.Repeat([]byte("k"), 5000), Value: nil}}}, ErrTooLarge},
		{"range start>end", &Batch{RangeChecks: []RangeCheck{{Start: []byte("b"), End: []byte("a")}}}, ErrInvalid},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := db.Commit(ctx, tc.b); !errors.Is(err, tc.want) {
				t.Fatalf("err = %v, want %v", err, tc.want)
			}
		})
	}
}

func TestBatchTooLargeNamesSizes(t *testing.T) {
	db := openTest(t, func(o *Options) { o.MemTableSize = 4 << 20 })
	var ops []Op
	for i := 0; i < 100; i++ {
		ops = append(ops, Op{Key: []byte(fmt.Sprintf("big/%d", i)), Value: make([]byte, 60<<10)})
	}
	_, err := db.Commit(context.Background(), &Batch{Ops: ops})
	if !errors.Is(err, ErrTooLarge) || !strings.Contains(err.Error(), "100 ops") {
		t.Fatalf("err = %v", err)
	}
}

// TestRoundSplitAcrossTxns: a round whose writers together exceed one
// Badger transaction is committed in several, each writer atomically.
func TestRoundSplitAcrossTxns(t *testing.T) {
	ctx := context.Background()
	db := openTest(t, func(o *Options) { o.MemTableSize = 4 << 20 })
	maxSize, _ := db.c.maxTxn()
	val := make([]byte, 32<<10)
	perWriter := 2
	writers := int(maxSize/int64(perWriter*len(val))) * 3
	queueN, release := holdRound(t, db)
	before := db.Stats()
	var wg sync.WaitGroup
	errs := make([]error, writers)
	for i := 0; i < writers; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			var ops []Op
			for j := 0; j < perWriter; j++ {
				ops = append(ops, Op{Key: []byte(fmt.Sprintf("w/%03d/%d", i, j)), Value: val})
			}
			_, errs[i] = db.Commit(ctx, &Batch{Ops: ops})
		}(i)
	}
	queueN(writers)
	release()
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("writer %d: %v", i, err)
		}
	}
	st := db.Stats()
	if st.Rounds-before.Rounds != 2 || st.Txns-before.Txns < 4 {
		t.Fatalf("stats %+v: want 2 rounds and the second split into >= 3 txns", st)
	}
	n := 0
	db.View(ctx, func(r Reader) error {
		return r.Scan([]byte("w/"), []byte("w0"), func(KV) error { n++; return nil })
	})
	if n != writers*perWriter {
		t.Fatalf("%d records, want %d", n, writers*perWriter)
	}
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not reached in 10s")
		}
		time.Sleep(time.Millisecond)
	}
}

// TestManyWritersShareRounds is the committer's acceptance test: 256
// concurrent writers commit with far fewer Badger transactions than writes.
func TestManyWritersShareRounds(t *testing.T) {
	ctx := context.Background()
	db := openTest(t)
	const writers, each = 256, 4
	var wg sync.WaitGroup
	errc := make(chan error, writers*each)
	for w := 0; w < writers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for i := 0; i < each; i++ {
				_, err := db.Commit(ctx, &Batch{Ops: []Op{put(fmt.Sprintf("m/%03d/%d", w, i), "v")}})
				if err != nil {
					errc <- err
				}
			}
		}(w)
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Fatal(err)
	}
	st := db.Stats()
	t.Logf("stats: %+v", st)
	if st.Committed != writers*each+1 { // +1: format record
		t.Fatalf("committed %d, want %d", st.Committed, writers*each+1)
	}
	if st.Txns*4 > st.Committed {
		t.Fatalf("%d txns for %d writes: want far fewer", st.Txns, st.Committed)
	}
}

// holdRound makes the next round wait until the returned release is called,
// so a test can queue writers that then share one round.
func holdRound(t *testing.T, db *DB) (queueN func(n int), release func()) {
	gate := make(chan struct{})
	held := make(chan struct{})
	var once, rel sync.Once
	db.c.testHook = func(int) {
		once.Do(func() { close(held); <-gate })
	}
	go db.Commit(context.Background(), &Batch{Ops: []Op{put("hold", "x")}})
	<-held
	release = func() { rel.Do(func() { close(gate) }) }
	t.Cleanup(release)
	return func(n int) { waitFor(t, func() bool { return db.c.queued() == n }) }, release
}

func TestInvalidWriterFailsAlone(t *testing.T) {
	ctx := context.Background()
	db := openTest(t)
	v0, _ := db.Commit(ctx, &Batch{Ops: []Op{put("x", "0")}})
	queueN, release := holdRound(t, db)
	type res struct {
		i   int
		err error
	}
	out := make(chan res, 10)
	for i := 0; i < 10; i++ {
		b := &Batch{Ops: []Op{put(fmt.Sprintf("ok/%d", i), "v")}}
		if i == 3 {
			b.Checks = []Check{{Key: []byte("x"), Version: v0 + 100}} // stale
		}
		go func(i int) { _, err := db.Commit(ctx, b); out <- res{i, err} }(i)
		queueN(i + 1)
	}
	before := db.Stats()
	release()
	for range 10 {
		r := <-out
		if (r.i == 3) != (r.err != nil) {
			t.Fatalf("writer %d: %v", r.i, r.err)
		}
		if r.i == 3 && !errors.Is(r.err, ErrConflict) {
			t.Fatalf("writer 3: %v, want conflict", r.err)
		}
	}
	if _, _, err := get(t, db, "ok/3"); !errors.Is(err, ErrNotFound) {
		t.Fatal("conflicting writer's op applied")
	}
	waitFor(t, func() bool { return db.Stats().Rounds >= before.Rounds+2 })
	if st := db.Stats(); st.Txns-before.Txns > 2 {
		t.Fatalf("stats before %+v after %+v: want the 9 writers in one txn", before, st)
	}
}

func TestChecksAgainstEarlierWritersInRound(t *testing.T) {
	ctx := context.Background()
	db := openTest(t)
	v0, _ := db.Commit(ctx, &Batch{Ops: []Op{put("acct", "100"), put("r/a", "1")}})
	queueN, release := holdRound(t, db)
	type res struct {
		ver Version
		err error
	}
	run := func(b *Batch) chan res {
		c := make(chan res, 1)
		go func() { v, err := db.Commit(ctx, b); c <- res{v, err} }()
		return c
	}
	// Writer 1 and 2 both read acct at v0; only the first may win.
	w1 := run(&Batch{Checks: []Check{{Key: []byte("acct"), Version: v0}}, Ops: []Op{put("acct", "90")}})
	queueN(1)
	w2 := run(&Batch{Checks: []Check{{Key: []byte("acct"), Version: v0}}, Ops: []Op{put("acct", "80")}})
	queueN(2)
	// Writer 3 checked "new" absent; writer 4 (later) also: only 3 wins.
	w3 := run(&Batch{Checks: []Check{{Key: []byte("new"), Version: 0}}, Ops: []Op{put("new", "3")}})
	queueN(3)
	w4 := run(&Batch{Checks: []Check{{Key: []byte("new"), Version: 0}}, Ops: []Op{put("new", "4")}})
	queueN(4)
	// Writer 5 scanned r/ and saw r/a; writer 6 inserts r/b before it in
	// the round... order: 6 queued first, then 5 conflicts.
	w6 := run(&Batch{Ops: []Op{put("r/b", "2")}})
	queueN(5)
	w5 := run(&Batch{RangeChecks: []RangeCheck{{Start: []byte("r/"), End: []byte("r0"), Seen: []KeyVersion{{Key: []byte("r/a"), Version: v0}}}}, Ops: []Op{put("sum", "1")}})
	queueN(6)
	release()
	r1, r2, r3, r4, r5, r6 := <-w1, <-w2, <-w3, <-w4, <-w5, <-w6
	if r1.err != nil || r3.err != nil || r6.err != nil {
		t.Fatalf("winners failed: %v %v %v", r1.err, r3.err, r6.err)
	}
	for i, r := range []res{r2, r4, r5} {
		if !errors.Is(r.err, ErrConflict) {
			t.Fatalf("loser %d: %v, want ErrConflict", i, r.err)
		}
	}
	if r1.ver != r3.ver || r1.ver != r6.ver {
		t.Fatalf("winners of one round should share a version: %d %d %d", r1.ver, r3.ver, r6.ver)
	}
	if v, _, _ := get(t, db, "acct"); string(v) != "90" {
		t.Fatalf("acct = %s", v)
	}
	if v, _, _ := get(t, db, "new"); string(v) != "3" {
		t.Fatalf("new = %s", v)
	}
}

func TestRangeChecks(t *testing.T) {
	ctx := context.Background()
	db := openTest(t)
	v0, _ := db.Commit(ctx, &Batch{Ops: []Op{put("q/1", "a"), put("q/2", "b")}})
	seen := []KeyVersion{{Key: []byte("q/1"), Version: v0}, {Key: []byte("q/2"), Version: v0}}
	rc := RangeCheck{Start: []byte("q/"), End: []byte("q0"), Seen: seen}
	// Unchanged range passes.
	if _, err := db.Commit(ctx, &Batch{RangeChecks: []RangeCheck{rc}, Ops: []Op{put("other", "x")}}); err != nil {
		t.Fatal(err)
	}
	// Insert into the range → conflict.
	db.Commit(ctx, &Batch{Ops: []Op{put("q/3", "c")}})
	if _, err := db.Commit(ctx, &Batch{RangeChecks: []RangeCheck{rc}}); !errors.Is(err, ErrConflict) || !strings.Contains(err.Error(), "inserted") {
		t.Fatalf("insert: %v", err)
	}
	// Delete from the range → conflict.
	v3, _ := db.Commit(ctx, &Batch{Ops: []Op{{Key: []byte("q/1"), Delete: true}}})
	_ = v3
	rc.Seen = append(seen, KeyVersion{Key: []byte("q/3"), Version: v0 + 2})
	if _, err := db.Commit(ctx, &Batch{RangeChecks: []RangeCheck{rc}}); !errors.Is(err, ErrConflict) || !strings.Contains(err.Error(), "removed") {
		t.Fatalf("delete: %v", err)
	}
	// Unbounded end sees keys past the prefix.
	if _, err := db.Commit(ctx, &Batch{RangeChecks: []RangeCheck{{Start: []byte("q/"), Seen: nil}}}); !errors.Is(err, ErrConflict) {
		t.Fatalf("unbounded: %v", err)
	}
}

func TestSequences(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	o := testOptions(dir)
	o.SequenceBlock = 10
	db, err := Open(o)
	if err != nil {
		t.Fatal(err)
	}
	a, _ := db.NextSequence(ctx, "ids", 1)
	b, _ := db.NextSequence(ctx, "ids", 5)
	c, _ := db.NextSequence(ctx, "ids", 20)
	d, _ := db.NextSequence(ctx, "ids", 1)
	if a != 1 || b != 2 || c != 7 || d != 27 {
		t.Fatalf("got %d %d %d %d", a, b, c, d)
	}
	if _, err := db.NextSequence(ctx, "ids", 0); !errors.Is(err, ErrInvalid) {
		t.Fatal(err)
	}
	db.Close()
	if _, err := db.NextSequence(ctx, "x", 1); !errors.Is(err, ErrClosed) {
		t.Fatalf("after close: %v", err)
	}
	db, err = Open(o)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	e, _ := db.NextSequence(ctx, "ids", 1)
	if e <= d {
		t.Fatalf("after reopen got %d, want > %d", e, d)
	}
	other, _ := db.NextSequence(ctx, "other", 1)
	if other != 1 {
		t.Fatalf("independent sequence starts at %d", other)
	}
}

func TestSecondOpenRefused(t *testing.T) {
	dir := t.TempDir()
	db1, err := Open(testOptions(dir))
	if err != nil {
		t.Fatal(err)
	}
	defer db1.Close()
	_, err = Open(testOptions(dir))
	var le *LockedError
	if !errors.Is(err, ErrLocked) || !errors.As(err, &le) || !strings.Contains(err.Error(), dir) {
		t.Fatalf("second open: %v", err)
	}
	// The first keeps working.
	if _, err := db1.Commit(context.Background(), &Batch{Ops: []Op{put("k", "v")}}); err != nil {
		t.Fatal(err)
	}
}

func TestNewerFormatRefused(t *testing.T) {
	dir := t.TempDir()
	db, err := Open(testOptions(dir))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.c.commit(context.Background(), &Batch{Ops: []Op{{Key: []byte(KeyFormat), Value: encodeMeta(Meta{FormatVersion: FormatVersion + 1})}}}, true); err != nil {
		t.Fatal(err)
	}
	db.Close()
	_, err = Open(testOptions(dir))
	var fe *FormatError
	if !errors.Is(err, ErrFormat) || !errors.As(err, &fe) || fe.Found != FormatVersion+1 {
		t.Fatalf("open newer: %v", err)
	}
	abs, _ := filepath.Abs(dir)
	for _, want := range []string{abs, fmt.Sprint(FormatVersion + 1), fmt.Sprint(FormatVersion)} {
		if !strings.Contains(err.Error(), want) {
			t.Fatalf("message %q lacks %q", err, want)
		}
	}
}

func TestCloseWithQueuedCommits(t *testing.T) {
	ctx := context.Background()
	db, err := Open(testOptions(t.TempDir()))
	if err != nil {
		t.Fatal(err)
	}
	queueN, release := holdRound(t, db)
	errs := make(chan error, 20)
	for i := 0; i < 20; i++ {
		go func(i int) {
			_, err := db.Commit(ctx, &Batch{Ops: []Op{put(fmt.Sprintf("c/%d", i), "v")}})
			errs <- err
		}(i)
	}
	queueN(20)
	closed := make(chan error)
	go func() { closed <- db.Close() }()
	waitFor(t, func() bool { db.c.mu.Lock(); defer db.c.mu.Unlock(); return db.c.stopped })
	release()
	if err := <-closed; err != nil {
		t.Fatal(err)
	}
	for range 20 {
		if err := <-errs; !errors.Is(err, ErrClosed) {
			t.Fatalf("queued commit: %v, want ErrClosed", err)
		}
	}
	if _, err := db.Commit(ctx, &Batch{}); !errors.Is(err, ErrClosed) {
		t.Fatal(err)
	}
	if err := db.View(ctx, func(Reader) error { return nil }); !errors.Is(err, ErrClosed) {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatalf("second close: %v", err)
	}
}

func TestCommitContextCanceledWhileQueued(t *testing.T) {
	db := openTest(t)
	queueN, release := holdRound(t, db)
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { _, err := db.Commit(ctx, &Batch{Ops: []Op{put("cancel/me", "v")}}); errc <- err }()
	queueN(1)
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v", err)
	}
	release()
	db.Commit(context.Background(), &Batch{Ops: []Op{put("after", "v")}})
	if _, _, err := get(t, db, "cancel/me"); !errors.Is(err, ErrNotFound) {
		t.Fatal("abandoned batch was applied")
	}
}

func TestOpenMemoryAndOptionsValidate(t *testing.T) {
	db, err := OpenMemory()
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.Commit(context.Background(), &Batch{Ops: []Op{put("m", "v")}}); err != nil {
		t.Fatal(err)
	}
	o := Options{GCInterval: -1}
	err = o.Validate()
	for _, want := range []string{"catalog.dir", "catalog.gc_interval", "catalog.gc_discard_ratio", "catalog.max_key_size", "catalog.max_value_size", "catalog.sequence_block", "catalog.memtable_size"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Fatalf("Validate() = %v, lacks %s", err, want)
		}
	}
}

// testOptions are the defaults with a small memtable (quick to open).
func testOptions(dir string) Options {
	o := DefaultOptions(dir)
	o.MemTableSize = 8 << 20
	return o
}

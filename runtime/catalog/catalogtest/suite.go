package catalogtest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hostd-dev/hostd/runtime/catalog"
)

// Run runs every case of the suite as a subtest of t, each on a store of
// its own from open.
func Run(t *testing.T, open func(t *testing.T) catalog.Store) {
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) { c.fn(t, open(t)) })
	}
}

var cases = []struct {
	name string
	fn   func(t *testing.T, s catalog.Store)
}{
	{"CommitAndView", testCommitAndView},
	{"ScanPagesAndStops", testScanPagesAndStops},
	{"InvalidBatches", testInvalidBatches},
	{"BatchTooLargeNamesSizes", testBatchTooLargeNamesSizes},
	{"RoundSplitAcrossTxns", testRoundSplitAcrossTxns},
	{"ManyWritersShareRounds", testManyWritersShareRounds},
	{"InvalidWriterFailsAlone", testInvalidWriterFailsAlone},
	{"ChecksAgainstEarlierWritersInRound", testChecksAgainstEarlierWritersInRound},
	{"SameKeyTwiceInRound", testSameKeyTwiceInRound},
	{"RangeChecks", testRangeChecks},
	{"RangeCheckIgnoresOtherDeletes", testRangeCheckIgnoresOtherDeletes},
	{"Sequences", testSequences},
	{"CloseWithQueuedCommits", testCloseWithQueuedCommits},
	{"CommitContextCanceledWhileQueued", testCommitContextCanceledWhileQueued},
	{"HammerMixed", testHammerMixed},
	{"TrackedRecordsReads", testTrackedRecordsReads},
	{"UpdateCounterHammer", testUpdateCounterHammer},
	{"UpdateRangeInvariant", testUpdateRangeInvariant},
	{"UpdateGivesUp", testUpdateGivesUp},
}

type (
	Batch      = catalog.Batch
	Op         = catalog.Op
	Check      = catalog.Check
	RangeCheck = catalog.RangeCheck
	KeyVersion = catalog.KeyVersion
	KV         = catalog.KV
	Reader     = catalog.Reader
	Version    = catalog.Version
)

func put(k, v string) Op { return Op{Key: []byte(k), Value: []byte(v)} }

func get(t *testing.T, s catalog.Store, key string) ([]byte, Version, error) {
	t.Helper()
	var (
		v   []byte
		ver Version
	)
	err := s.View(context.Background(), func(r Reader) error {
		var err error
		v, ver, err = r.Get([]byte(key))
		return err
	})
	return v, ver, err
}

func mustCommit(t *testing.T, s catalog.Store, b *Batch) Version {
	t.Helper()
	v, err := s.Commit(context.Background(), b)
	if err != nil {
		t.Fatal(err)
	}
	return v
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

func probe(t *testing.T, s catalog.Store) catalog.Probe {
	t.Helper()
	p, ok := s.(catalog.Probe)
	if !ok {
		t.Skipf("%T does not implement catalog.Probe", s)
	}
	return p
}

func limits(t *testing.T, s catalog.Store) catalog.Limits {
	t.Helper()
	l, ok := s.(catalog.Limiter)
	if !ok {
		t.Skipf("%T does not implement catalog.Limiter", s)
	}
	return l.Limits()
}

// holdRound makes the next round wait until the returned release is called,
// so a test can queue writers that then share one round.
func holdRound(t *testing.T, s catalog.Store) (queueN func(n int), release func()) {
	p := probe(t, s)
	gate := make(chan struct{})
	held := make(chan struct{})
	var once, rel sync.Once
	p.SetRoundHook(func(int) {
		once.Do(func() { close(held); <-gate })
	})
	go s.Commit(context.Background(), &Batch{Ops: []Op{put("hold", "x")}})
	<-held
	release = func() { rel.Do(func() { close(gate) }) }
	t.Cleanup(release)
	return func(n int) { waitFor(t, func() bool { return p.Queued() == n }) }, release
}

func testCommitAndView(t *testing.T, db catalog.Store) {
	ctx := context.Background()
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
	if _, _, err := get(t, db, "a/1"); !errors.Is(err, catalog.ErrNotFound) {
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
	if !errors.Is(err, catalog.ErrConflict) {
		t.Fatalf("stale check: %v", err)
	}
	if _, _, err := get(t, db, "a/3"); !errors.Is(err, catalog.ErrNotFound) {
		t.Fatalf("conflicting batch applied: %v", err)
	}
	// A snapshot does not see later commits.
	err = db.View(ctx, func(r Reader) error {
		if _, _, err := r.Get([]byte("a/2")); err != nil {
			return err
		}
		mustCommit(t, db, &Batch{Ops: []Op{put("a/2", "later"), put("a/4", "new")}})
		v, ver, err := r.Get([]byte("a/2"))
		if err != nil || string(v) != "y" || ver != v1 {
			return fmt.Errorf("snapshot get a/2 = %q %d %v, want y %d", v, ver, err, v1)
		}
		if _, _, err := r.Get([]byte("a/4")); !errors.Is(err, catalog.ErrNotFound) {
			return fmt.Errorf("snapshot sees a later insert: %v", err)
		}
		n := 0
		if err := r.Scan([]byte("a/"), []byte("a0"), func(KV) error { n++; return nil }); err != nil || n != 1 {
			return fmt.Errorf("snapshot scan saw %d records (%v), want 1", n, err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	// The batch's own duplicate keys: the last op wins.
	mustCommit(t, db, &Batch{Ops: []Op{put("d/1", "first"), put("d/2", "x"), {Key: []byte("d/2"), Delete: true}, put("d/1", "last")}})
	if v, _, _ := get(t, db, "d/1"); string(v) != "last" {
		t.Fatalf("d/1 = %q, want last", v)
	}
	if _, _, err := get(t, db, "d/2"); !errors.Is(err, catalog.ErrNotFound) {
		t.Fatalf("d/2: %v, want deleted by the later op", err)
	}
}

// testScanPagesAndStops: a scan over more records than one page (etcd
// pages) sees each once, in order; ErrStop ends it without error; another
// error is returned as is.
func testScanPagesAndStops(t *testing.T, db catalog.Store) {
	ctx := context.Background()
	const n = 700
	for i := 0; i < n; i += 50 {
		var b Batch
		for j := i; j < i+50; j++ {
			b.Ops = append(b.Ops, put(fmt.Sprintf("p/%04d", j), strconv.Itoa(j)))
		}
		mustCommit(t, db, &b)
	}
	mustCommit(t, db, &Batch{Ops: []Op{put("p0", "outside"), put("o", "outside")}})
	var got []string
	err := db.View(ctx, func(r Reader) error {
		return r.Scan([]byte("p/"), []byte("p0"), func(kv KV) error {
			got = append(got, string(kv.Key))
			return nil
		})
	})
	if err != nil || len(got) != n {
		t.Fatalf("scan: %d records, %v", len(got), err)
	}
	for i, k := range got {
		if k != fmt.Sprintf("p/%04d", i) {
			t.Fatalf("record %d is %q", i, k)
		}
	}
	count := 0
	err = db.View(ctx, func(r Reader) error {
		return r.Scan([]byte("p/"), nil, func(kv KV) error {
			if count++; count == 300 {
				return catalog.ErrStop
			}
			return nil
		})
	})
	if err != nil || count != 300 {
		t.Fatalf("stopped scan: %d %v", count, err)
	}
	mine := errors.New("mine")
	err = db.View(ctx, func(r Reader) error {
		return r.Scan([]byte("p/"), nil, func(KV) error { return mine })
	})
	if !errors.Is(err, mine) {
		t.Fatalf("scan error: %v", err)
	}
	// Unbounded: everything from start on, past the prefix.
	var tail []string
	db.View(ctx, func(r Reader) error {
		return r.Scan([]byte("p/0699"), nil, func(kv KV) error {
			tail = append(tail, string(kv.Key))
			return nil
		})
	})
	// (the catalog's own sys/ records sort after p0 and may be seen)
	if len(tail) < 2 || fmt.Sprint(tail[:2]) != "[p/0699 p0]" || strings.Contains(fmt.Sprint(tail), " o") {
		t.Fatalf("unbounded scan = %v", tail)
	}
}

func testInvalidBatches(t *testing.T, db catalog.Store) {
	ctx := context.Background()
	lim := limits(t, db)
	cases := []struct {
		name string
		b    *Batch
		want error
	}{
		{"nil", nil, catalog.ErrInvalid},
		{"empty key", &Batch{Ops: []Op{put("", "x")}}, catalog.ErrInvalid},
		{"sys namespace", &Batch{Ops: []Op{put("sys/format", "x")}}, catalog.ErrInvalid},
		{"empty check key", &Batch{Checks: []Check{{}}, Ops: []Op{put("k", "v")}}, catalog.ErrInvalid},
		{"value too large", &Batch{Ops: []Op{{Key: []byte("k"), Value: make([]byte, lim.MaxValueSize+1)}}}, catalog.ErrTooLarge},
		{"key too large", &Batch{Ops: []Op{{Key: bytes.Repeat([]byte("k"), lim.MaxKeySize+1), Value: nil}}}, catalog.ErrTooLarge},
		{"range start>end", &Batch{RangeChecks: []RangeCheck{{Start: []byte("b"), End: []byte("a")}}}, catalog.ErrInvalid},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := db.Commit(ctx, tc.b); !errors.Is(err, tc.want) {
				t.Fatalf("err = %v, want %v", err, tc.want)
			}
		})
	}
	if _, _, err := get(t, db, "k"); !errors.Is(err, catalog.ErrNotFound) {
		t.Fatalf("an invalid batch was applied: %v", err)
	}
	err := db.View(ctx, func(r Reader) error { _, _, err := r.Get(nil); return err })
	if !errors.Is(err, catalog.ErrInvalid) {
		t.Fatalf("get of an empty key: %v", err)
	}
}

// testBatchTooLargeNamesSizes: a batch that can never fit one atomic
// commit is refused with ErrTooLarge naming its size, and nothing of it is
// written; by bytes and by op count.
func testBatchTooLargeNamesSizes(t *testing.T, db catalog.Store) {
	lim := limits(t, db)
	val := make([]byte, 60<<10)
	n := int(lim.MaxBatchSize/int64(len(val))) + 2
	var ops []Op
	for i := 0; i < n; i++ {
		ops = append(ops, Op{Key: []byte(fmt.Sprintf("big/%d", i)), Value: val})
	}
	_, err := db.Commit(context.Background(), &Batch{Ops: ops})
	if !errors.Is(err, catalog.ErrTooLarge) || !strings.Contains(err.Error(), fmt.Sprintf("%d ops", n)) {
		t.Fatalf("err = %v", err)
	}
	ops = nil
	for i := int64(0); i < lim.MaxBatchOps; i++ {
		ops = append(ops, put(fmt.Sprintf("many/%d", i), "v"))
	}
	_, err = db.Commit(context.Background(), &Batch{Ops: ops})
	if !errors.Is(err, catalog.ErrTooLarge) || !strings.Contains(err.Error(), fmt.Sprintf("%d ops", len(ops))) {
		t.Fatalf("%d ops: err = %v", len(ops), err)
	}
	for _, k := range []string{"big/0", "many/0"} {
		if _, _, err := get(t, db, k); !errors.Is(err, catalog.ErrNotFound) {
			t.Fatalf("%s of a refused batch: %v", k, err)
		}
	}
}

// testRoundSplitAcrossTxns: a round whose writers together exceed one
// transaction is committed in several, each writer atomically.
func testRoundSplitAcrossTxns(t *testing.T, db catalog.Store) {
	ctx := context.Background()
	lim := limits(t, db)
	p := probe(t, db)
	val := make([]byte, 32<<10)
	perWriter := 2
	writers := int(lim.MaxBatchSize/int64(perWriter*len(val))) * 3
	queueN, release := holdRound(t, db)
	before := p.Stats()
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
	st := p.Stats()
	if st.Rounds-before.Rounds != 2 || st.Txns-before.Txns < 4 {
		t.Fatalf("stats before %+v after %+v: want 2 rounds and the second split into >= 3 txns", before, st)
	}
	n := 0
	db.View(ctx, func(r Reader) error {
		return r.Scan([]byte("w/"), []byte("w0"), func(KV) error { n++; return nil })
	})
	if n != writers*perWriter {
		t.Fatalf("%d records, want %d", n, writers*perWriter)
	}
}

// testManyWritersShareRounds is the committer's acceptance test: 256
// concurrent writers commit with far fewer transactions than writes.
func testManyWritersShareRounds(t *testing.T, db catalog.Store) {
	ctx := context.Background()
	p := probe(t, db)
	before := p.Stats()
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
	st := p.Stats()
	t.Logf("stats: %+v", st)
	committed, txns := st.Committed-before.Committed, st.Txns-before.Txns
	if committed != writers*each {
		t.Fatalf("committed %d, want %d", committed, writers*each)
	}
	if txns*4 > committed {
		t.Fatalf("%d txns for %d writes: want far fewer", txns, committed)
	}
}

func testInvalidWriterFailsAlone(t *testing.T, db catalog.Store) {
	ctx := context.Background()
	p := probe(t, db)
	v0 := mustCommit(t, db, &Batch{Ops: []Op{put("x", "0")}})
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
	before := p.Stats()
	release()
	for range 10 {
		r := <-out
		if (r.i == 3) != (r.err != nil) {
			t.Fatalf("writer %d: %v", r.i, r.err)
		}
		if r.i == 3 && !errors.Is(r.err, catalog.ErrConflict) {
			t.Fatalf("writer 3: %v, want conflict", r.err)
		}
	}
	if _, _, err := get(t, db, "ok/3"); !errors.Is(err, catalog.ErrNotFound) {
		t.Fatal("conflicting writer's op applied")
	}
	waitFor(t, func() bool { return p.Stats().Rounds >= before.Rounds+2 })
	if st := p.Stats(); st.Txns-before.Txns > 2 {
		t.Fatalf("stats before %+v after %+v: want the 9 writers in one txn", before, st)
	}
}

func testChecksAgainstEarlierWritersInRound(t *testing.T, db catalog.Store) {
	ctx := context.Background()
	v0 := mustCommit(t, db, &Batch{Ops: []Op{put("acct", "100"), put("r/a", "1")}})
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
	// Writer 6 inserts r/b; writer 5, queued after it, scanned r/ and saw
	// only r/a: it conflicts.
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
		if !errors.Is(r.err, catalog.ErrConflict) {
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
	if _, _, err := get(t, db, "sum"); !errors.Is(err, catalog.ErrNotFound) {
		t.Fatalf("conflicting writer 5 applied: %v", err)
	}
}

// testSameKeyTwiceInRound: writers of one round that write the same key
// (blindly, or after an earlier writer deleted it) all commit, in queue
// order: the later write wins.
func testSameKeyTwiceInRound(t *testing.T, db catalog.Store) {
	ctx := context.Background()
	mustCommit(t, db, &Batch{Ops: []Op{put("gone", "old")}})
	queueN, release := holdRound(t, db)
	errs := make(chan error, 4)
	batches := []*Batch{
		{Ops: []Op{put("same", "1")}},
		{Ops: []Op{put("same", "2")}},
		{Ops: []Op{{Key: []byte("gone"), Delete: true}}},
		{Checks: []Check{{Key: []byte("gone"), Version: 0}}, Ops: []Op{put("gone", "new")}},
	}
	for i, b := range batches {
		go func() { _, err := db.Commit(ctx, b); errs <- err }()
		queueN(i + 1)
	}
	release()
	for range batches {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	if v, _, _ := get(t, db, "same"); string(v) != "2" {
		t.Fatalf("same = %q, want the later writer's 2", v)
	}
	if v, _, _ := get(t, db, "gone"); string(v) != "new" {
		t.Fatalf("gone = %q, want new", v)
	}
}

func testRangeChecks(t *testing.T, db catalog.Store) {
	ctx := context.Background()
	v0 := mustCommit(t, db, &Batch{Ops: []Op{put("q/1", "a"), put("q/2", "b")}})
	seen := []KeyVersion{{Key: []byte("q/1"), Version: v0}, {Key: []byte("q/2"), Version: v0}}
	rc := RangeCheck{Start: []byte("q/"), End: []byte("q0"), Seen: seen}
	// Unchanged range passes.
	if _, err := db.Commit(ctx, &Batch{RangeChecks: []RangeCheck{rc}, Ops: []Op{put("other", "x")}}); err != nil {
		t.Fatal(err)
	}
	// Insert into the range → conflict.
	v3 := mustCommit(t, db, &Batch{Ops: []Op{put("q/3", "c")}})
	if _, err := db.Commit(ctx, &Batch{RangeChecks: []RangeCheck{rc}}); !errors.Is(err, catalog.ErrConflict) || !strings.Contains(err.Error(), "inserted") {
		t.Fatalf("insert: %v", err)
	}
	// Update inside the range → conflict.
	rc.Seen = append(seen, KeyVersion{Key: []byte("q/3"), Version: v3})
	if _, err := db.Commit(ctx, &Batch{RangeChecks: []RangeCheck{rc}}); err != nil {
		t.Fatalf("range as it is: %v", err)
	}
	v4 := mustCommit(t, db, &Batch{Ops: []Op{put("q/2", "b2")}})
	if _, err := db.Commit(ctx, &Batch{RangeChecks: []RangeCheck{rc}}); !errors.Is(err, catalog.ErrConflict) {
		t.Fatalf("update: %v", err)
	}
	rc.Seen[1].Version = v4
	// Delete from the range → conflict.
	mustCommit(t, db, &Batch{Ops: []Op{{Key: []byte("q/1"), Delete: true}}})
	if _, err := db.Commit(ctx, &Batch{RangeChecks: []RangeCheck{rc}}); !errors.Is(err, catalog.ErrConflict) || !strings.Contains(err.Error(), "removed") {
		t.Fatalf("delete: %v", err)
	}
	// The range as it is now passes again.
	rc.Seen = rc.Seen[1:]
	if _, err := db.Commit(ctx, &Batch{RangeChecks: []RangeCheck{rc}}); err != nil {
		t.Fatalf("range as it is after the delete: %v", err)
	}
	// Unbounded end sees keys past the prefix.
	if _, err := db.Commit(ctx, &Batch{RangeChecks: []RangeCheck{{Start: []byte("q/"), Seen: nil}}}); !errors.Is(err, catalog.ErrConflict) {
		t.Fatalf("unbounded: %v", err)
	}
	// An empty range that stays empty passes; one that gets a key does not.
	empty := RangeCheck{Start: []byte("e/"), End: []byte("e0")}
	if _, err := db.Commit(ctx, &Batch{RangeChecks: []RangeCheck{empty}}); err != nil {
		t.Fatalf("empty range: %v", err)
	}
	mustCommit(t, db, &Batch{Ops: []Op{put("e/x", "1")}})
	if _, err := db.Commit(ctx, &Batch{RangeChecks: []RangeCheck{empty}}); !errors.Is(err, catalog.ErrConflict) {
		t.Fatalf("empty range got a key: %v", err)
	}
}

// testRangeCheckIgnoresOtherDeletes: deletes and writes outside a checked
// range never make it conflict (a backend that tracks deletes coarsely
// must still tell ranges apart).
func testRangeCheckIgnoresOtherDeletes(t *testing.T, db catalog.Store) {
	ctx := context.Background()
	v0 := mustCommit(t, db, &Batch{Ops: []Op{put("r1/a", "1"), put("r2/a", "1"), put("r2/b", "1"), put("r1x", "1")}})
	rc := RangeCheck{Start: []byte("r1/"), End: []byte("r10"), Seen: []KeyVersion{{Key: []byte("r1/a"), Version: v0}}}
	mustCommit(t, db, &Batch{Ops: []Op{{Key: []byte("r2/a"), Delete: true}, put("r2/c", "x"), {Key: []byte("r1x"), Delete: true}}})
	if _, err := db.Commit(ctx, &Batch{RangeChecks: []RangeCheck{rc}, Ops: []Op{put("r1/b", "2")}}); err != nil {
		t.Fatalf("range check after writes elsewhere: %v", err)
	}
}

func testSequences(t *testing.T, db catalog.Store) {
	ctx := context.Background()
	a, _ := db.NextSequence(ctx, "ids", 1)
	b, _ := db.NextSequence(ctx, "ids", 5)
	c, _ := db.NextSequence(ctx, "ids", 20)
	d, _ := db.NextSequence(ctx, "ids", 1)
	if a != 1 || b != 2 || c != 7 || d != 27 {
		t.Fatalf("got %d %d %d %d", a, b, c, d)
	}
	// A block larger than any default is reserved at once.
	e, err := db.NextSequence(ctx, "ids", 5000)
	if err != nil || e != 28 {
		t.Fatalf("large block: %d %v", e, err)
	}
	if f, _ := db.NextSequence(ctx, "ids", 1); f != 5028 {
		t.Fatalf("after large block: %d", f)
	}
	for _, bad := range []struct {
		name string
		n    uint64
	}{{"ids", 0}, {"", 1}, {strings.Repeat("x", 257), 1}} {
		if _, err := db.NextSequence(ctx, bad.name, bad.n); !errors.Is(err, catalog.ErrInvalid) {
			t.Fatalf("NextSequence(%.10q, %d) = %v, want ErrInvalid", bad.name, bad.n, err)
		}
	}
	other, _ := db.NextSequence(ctx, "other", 1)
	if other != 1 {
		t.Fatalf("independent sequence starts at %d", other)
	}
	db.Close()
	if _, err := db.NextSequence(ctx, "x", 1); !errors.Is(err, catalog.ErrClosed) {
		t.Fatalf("after close: %v", err)
	}
}

func testCloseWithQueuedCommits(t *testing.T, db catalog.Store) {
	ctx := context.Background()
	p := probe(t, db)
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
	waitFor(t, p.Stopping)
	release()
	if err := <-closed; err != nil {
		t.Fatal(err)
	}
	for range 20 {
		if err := <-errs; !errors.Is(err, catalog.ErrClosed) {
			t.Fatalf("queued commit: %v, want ErrClosed", err)
		}
	}
	if _, err := db.Commit(ctx, &Batch{}); !errors.Is(err, catalog.ErrClosed) {
		t.Fatal(err)
	}
	if err := db.View(ctx, func(Reader) error { return nil }); !errors.Is(err, catalog.ErrClosed) {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatalf("second close: %v", err)
	}
}

func testCommitContextCanceledWhileQueued(t *testing.T, db catalog.Store) {
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
	mustCommit(t, db, &Batch{Ops: []Op{put("after", "v")}})
	if _, _, err := get(t, db, "cancel/me"); !errors.Is(err, catalog.ErrNotFound) {
		t.Fatal("abandoned batch was applied")
	}
	// A context canceled before Commit applies nothing either.
	if _, err := db.Commit(ctx, &Batch{Ops: []Op{put("cancel/early", "v")}}); !errors.Is(err, context.Canceled) {
		t.Fatalf("canceled ctx: %v", err)
	}
	if err := db.View(ctx, func(Reader) error { return nil }); !errors.Is(err, context.Canceled) {
		t.Fatalf("view with canceled ctx: %v", err)
	}
}

func testHammerMixed(t *testing.T, db catalog.Store) { HammerMixed(t, db) }

// HammerMixed runs commits with checks, range scans, snapshots and
// sequence allocations concurrently (run with -race). Invariants: every
// snapshot sees the two halves of each pair written together (atomicity),
// and sequence values are unique. Run (as case HammerMixed) uses the
// backend's default sequence block; backends also call it on a store with
// a tiny block, so that reservations race each other.
func HammerMixed(t *testing.T, db catalog.Store) {
	ctx := context.Background()
	var wg sync.WaitGroup
	errc := make(chan error, 64)
	seqs := sync.Map{}
	for w := 0; w < 8; w++ {
		wg.Add(3)
		go func(w int) { // atomic pair writer
			defer wg.Done()
			for i := 0; i < 40; i++ {
				v := fmt.Sprintf("%d-%d", w, i)
				err := catalog.Update(ctx, db, func(r *catalog.Tracked) ([]Op, error) {
					if _, _, err := r.Get([]byte("pair/a")); err != nil && !errors.Is(err, catalog.ErrNotFound) {
						return nil, err
					}
					return []Op{put("pair/a", v), put("pair/b", v)}, nil
				})
				if err != nil && !errors.Is(err, catalog.ErrConflict) {
					errc <- err
					return
				}
			}
		}(w)
		go func() { // snapshot reader
			defer wg.Done()
			for i := 0; i < 60; i++ {
				err := db.View(ctx, func(r Reader) error {
					a, _, ea := r.Get([]byte("pair/a"))
					b, _, eb := r.Get([]byte("pair/b"))
					if (ea == nil) != (eb == nil) || string(a) != string(b) {
						return fmt.Errorf("torn pair: %q/%v vs %q/%v", a, ea, b, eb)
					}
					return r.Scan([]byte("pair/"), []byte("pair0"), func(KV) error { return nil })
				})
				if err != nil {
					errc <- err
					return
				}
			}
		}()
		go func() { // sequences
			defer wg.Done()
			for i := 0; i < 50; i++ {
				v, err := db.NextSequence(ctx, "h", 2)
				if err != nil {
					errc <- err
					return
				}
				for _, x := range []uint64{v, v + 1} {
					if _, dup := seqs.LoadOrStore(x, true); dup {
						errc <- fmt.Errorf("sequence value %d handed out twice", x)
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Fatal(err)
	}
}

func testTrackedRecordsReads(t *testing.T, db catalog.Store) {
	ctx := context.Background()
	v0 := mustCommit(t, db, &Batch{Ops: []Op{put("t/a", "1"), put("t/b", "2"), put("t/c", "3")}})
	var checks []Check
	var ranges []RangeCheck
	db.View(ctx, func(r Reader) error {
		tr := catalog.NewTracked(r)
		tr.Get([]byte("t/a"))
		tr.Get([]byte("t/missing"))
		tr.Get([]byte("t/a"))
		tr.Scan([]byte("t/"), []byte("t0"), func(kv KV) error {
			if string(kv.Key) == "t/b" {
				return catalog.ErrStop
			}
			return nil
		})
		checks, ranges = tr.Checks()
		return nil
	})
	if len(checks) != 2 || string(checks[0].Key) != "t/a" || checks[0].Version != v0 || checks[1].Version != 0 {
		t.Fatalf("checks = %+v", checks)
	}
	if len(ranges) != 1 || string(ranges[0].End) != "t/b\x00" || len(ranges[0].Seen) != 2 {
		t.Fatalf("ranges = %+v", ranges)
	}
	// A write past the stopped scan's end does not conflict; one inside does.
	mustCommit(t, db, &Batch{Ops: []Op{put("t/d", "4")}})
	if _, err := db.Commit(ctx, &Batch{RangeChecks: ranges}); err != nil {
		t.Fatalf("outside covered range: %v", err)
	}
	mustCommit(t, db, &Batch{Ops: []Op{put("t/aa", "x")}})
	if _, err := db.Commit(ctx, &Batch{RangeChecks: ranges}); !errors.Is(err, catalog.ErrConflict) {
		t.Fatalf("inside covered range: %v", err)
	}
}

// testUpdateCounterHammer: many goroutines increment one counter with
// Update; conflicts are retried and no increment is lost.
func testUpdateCounterHammer(t *testing.T, db catalog.Store) {
	ctx := context.Background()
	const workers, each = 16, 20
	var wg sync.WaitGroup
	var failures sync.Map
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for i := 0; i < each; i++ {
				for {
					err := catalog.Update(ctx, db, func(r *catalog.Tracked) ([]Op, error) {
						v, _, err := r.Get([]byte("ctr"))
						if err != nil && !errors.Is(err, catalog.ErrNotFound) {
							return nil, err
						}
						n, _ := strconv.Atoi(string(v))
						return []Op{put("ctr", strconv.Itoa(n+1)), put(fmt.Sprintf("log/%02d/%02d", w, i), "x")}, nil
					})
					if err == nil {
						break
					}
					if !errors.Is(err, catalog.ErrConflict) {
						failures.Store(w, err)
						return
					}
				}
			}
		}(w)
	}
	wg.Wait()
	failures.Range(func(k, v any) bool { t.Errorf("worker %v: %v", k, v); return true })
	v, _, err := get(t, db, "ctr")
	if err != nil || string(v) != strconv.Itoa(workers*each) {
		t.Fatalf("counter = %s %v, want %d", v, err, workers*each)
	}
}

// testUpdateRangeInvariant: writers each insert a member only while the
// range holds fewer than 5 (a scan-based invariant); range checks keep it.
func testUpdateRangeInvariant(t *testing.T, db catalog.Store) {
	ctx := context.Background()
	var wg sync.WaitGroup
	errc := make(chan error, 20)
	for w := 0; w < 20; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for {
				err := catalog.Update(ctx, db, func(r *catalog.Tracked) ([]Op, error) {
					n := 0
					if err := r.Scan([]byte("grp/"), []byte("grp0"), func(KV) error { n++; return nil }); err != nil {
						return nil, err
					}
					if n >= 5 {
						return nil, nil
					}
					return []Op{put(fmt.Sprintf("grp/%02d", w), "m")}, nil
				})
				if !errors.Is(err, catalog.ErrConflict) {
					if err != nil {
						errc <- err
					}
					return
				}
			}
		}(w)
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Fatal(err)
	}
	n := 0
	db.View(ctx, func(r Reader) error {
		return r.Scan([]byte("grp/"), []byte("grp0"), func(KV) error { n++; return nil })
	})
	if n != 5 {
		t.Fatalf("group has %d members, want exactly 5", n)
	}
}

// conflictStore fails every commit with ErrConflict (a fault injector).
type conflictStore struct {
	catalog.Store
	commits int
}

func (c *conflictStore) Commit(ctx context.Context, b *Batch) (Version, error) {
	c.commits++
	return 0, fmt.Errorf("%w: injected", catalog.ErrConflict)
}

func testUpdateGivesUp(t *testing.T, db catalog.Store) {
	cs := &conflictStore{Store: db}
	err := catalog.Update(context.Background(), cs, func(r *catalog.Tracked) ([]Op, error) {
		return []Op{put("k", "v")}, nil
	})
	if !errors.Is(err, catalog.ErrConflict) || !strings.Contains(err.Error(), "gave up after 16 attempts") || cs.commits != catalog.UpdateAttempts {
		t.Fatalf("err = %v after %d commits", err, cs.commits)
	}
	myErr := errors.New("mine")
	if err := catalog.Update(context.Background(), db, func(*catalog.Tracked) ([]Op, error) { return nil, myErr }); err != myErr {
		t.Fatalf("fn error: %v", err)
	}
	// fn returning no ops commits nothing and returns version 0.
	if v, err := catalog.UpdateVersion(context.Background(), db, func(*catalog.Tracked) ([]Op, error) { return nil, nil }); v != 0 || err != nil {
		t.Fatalf("no ops: %d %v", v, err)
	}
}

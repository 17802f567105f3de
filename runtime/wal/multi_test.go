package wal_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/hostd-dev/hostd/runtime/catalog"
	"github.com/hostd-dev/hostd/runtime/wal"
)

// TestAppendMultiOneCommit: parts for several queues land in one catalog
// commit, with consecutive offsets per queue and increasing ticks.
func TestAppendMultiOneCommit(t *testing.T) {
	ctx := context.Background()
	db := openDB(t, t.TempDir())
	defer db.Close()
	cs := &countingStore{Store: db}
	w := openWAL(t, cs, wal.Config{Queues: []string{"a", "b", "c"}})
	if _, err := w.Append(ctx, "b", []wal.Record{rec("b0")}); err != nil {
		t.Fatal(err)
	}
	before := cs.commits.Load()
	ents, err := w.AppendMulti(ctx, []wal.Part{
		{Queue: "a", Recs: []wal.Record{rec("a0"), rec("a1")}},
		{Queue: "b", Recs: []wal.Record{rec("b1")}},
		{Queue: "c", Recs: []wal.Record{rec("c0")}},
		{Queue: "a", Recs: []wal.Record{rec("a2")}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if n := cs.commits.Load() - before; n != 1 {
		t.Fatalf("AppendMulti took %d commits, want 1", n)
	}
	want := [][]uint64{{0, 1}, {1}, {0}, {2}}
	var lastTick uint64
	for i, es := range ents {
		if len(es) != len(want[i]) {
			t.Fatalf("part %d: %d entries, want %d", i, len(es), len(want[i]))
		}
		for j, e := range es {
			if e.Offset != want[i][j] {
				t.Fatalf("part %d entry %d: offset %d, want %d", i, j, e.Offset, want[i][j])
			}
			if e.Tick <= lastTick {
				t.Fatalf("part %d entry %d: tick %d not after %d", i, j, e.Tick, lastTick)
			}
			lastTick = e.Tick
		}
	}
	got, err := w.Read(ctx, "a", 0, 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 3 || string(got[2].Payload) != "a2" {
		t.Fatalf("queue a: %+v", got)
	}
}

// TestAppendMultiAllOrNothing: a sealed or missing queue in one part fails
// the whole call with a *PartError naming it, and nothing of the call is
// appended to the other queues; other callers in the same round are not
// affected.
func TestAppendMultiAllOrNothing(t *testing.T) {
	ctx := context.Background()
	db := openDB(t, t.TempDir())
	defer db.Close()
	w := openWAL(t, db, wal.Config{Queues: []string{"a", "s"}})
	var seal []catalog.Op
	var checks []catalog.Check
	if err := db.View(ctx, func(r catalog.Reader) error {
		var err error
		_, seal, checks, err = wal.SealOps(r, "s")
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Commit(ctx, &catalog.Batch{Ops: seal, Checks: checks}); err != nil {
		t.Fatal(err)
	}
	w.Changed("s")
	for _, tc := range []struct {
		bad   string
		cause error
	}{{"s", wal.ErrSealed}, {"missing", wal.ErrNoQueue}} {
		_, err := w.AppendMulti(ctx, []wal.Part{{Queue: "a", Recs: []wal.Record{rec("x")}}, {Queue: tc.bad, Recs: []wal.Record{rec("y")}}})
		var pe *wal.PartError
		if !errors.As(err, &pe) || pe.Index != 1 || pe.Queue != tc.bad || !errors.Is(err, tc.cause) {
			t.Fatalf("%s: err %v, want a PartError for part 1 matching %v", tc.bad, err, tc.cause)
		}
		if b, _ := w.Bounds(ctx, "a"); b.Max != 0 {
			t.Fatalf("%s: queue a has %d entries after a failed multi-append", tc.bad, b.Max)
		}
	}
	// Invalid parts fail before queuing, also with a PartError.
	_, err := w.AppendMulti(ctx, []wal.Part{{Queue: "a", Recs: []wal.Record{rec("x")}}, {Queue: "a"}})
	var pe *wal.PartError
	if !errors.As(err, &pe) || pe.Index != 1 || !errors.Is(err, wal.ErrInvalid) {
		t.Fatalf("empty part: %v", err)
	}
	if _, err := w.AppendMulti(ctx, nil); !errors.Is(err, wal.ErrInvalid) {
		t.Fatalf("no parts: %v", err)
	}
	// Single-queue Append keeps its plain errors.
	if _, err := w.Append(ctx, "s", []wal.Record{rec("z")}); !errors.Is(err, wal.ErrSealed) || errors.As(err, &pe) {
		t.Fatalf("Append to a sealed queue: %v", err)
	}
}

// TestAppendMultiHammer: concurrent multi-queue and single-queue appends
// with injected commit failures; every queue stays gap-free and every
// successful call's entries are where it was told they are, failed calls
// left nothing.
func TestAppendMultiHammer(t *testing.T) {
	ctx := context.Background()
	db := openDB(t, t.TempDir())
	defer db.Close()
	cs := &countingStore{Store: db}
	queues := []string{"q0", "q1", "q2", "q3"}
	w := openWAL(t, cs, wal.Config{Queues: queues})
	cs.fail = func(n int64) bool { return n%5 == 0 }
	type placed struct {
		queue string
		off   uint64
		body  string
	}
	var mu sync.Mutex
	var ok []placed
	failed := 0
	var wg sync.WaitGroup
	for g := 0; g < 16; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			for i := 0; i < 15; i++ {
				var parts []wal.Part
				for k, q := range queues {
					if (g+i+k)%2 == 0 || k == 0 {
						parts = append(parts, wal.Part{Queue: q, Recs: []wal.Record{rec(fmt.Sprintf("%d/%d/%s", g, i, q))}})
					}
				}
				ents, err := w.AppendMulti(ctx, parts)
				mu.Lock()
				if err != nil {
					failed++
				} else {
					for k, p := range parts {
						ok = append(ok, placed{p.Queue, ents[k][0].Offset, string(p.Recs[0].Payload)})
					}
				}
				mu.Unlock()
			}
		}(g)
	}
	wg.Wait()
	cs.fail = nil
	if failed == 0 {
		t.Fatal("no call failed: fault injection not exercised")
	}
	count := map[string]int{}
	for _, p := range ok {
		count[p.queue]++
		got, err := w.Read(ctx, p.queue, p.off, 1)
		if err != nil || len(got) != 1 || string(got[0].Payload) != p.body {
			t.Fatalf("%s@%d: %v %v, want %q", p.queue, p.off, got, err, p.body)
		}
	}
	for _, q := range queues {
		b, err := w.Bounds(ctx, q)
		if err != nil {
			t.Fatal(err)
		}
		if int(b.Max) != count[q] {
			t.Fatalf("queue %s: max %d, but %d successful appends (failed calls left entries, or gaps)", q, b.Max, count[q])
		}
	}
	t.Logf("%d parts ok, %d calls failed, %d commits", len(ok), failed, cs.commits.Load())
}

func TestNextHint(t *testing.T) {
	ctx := context.Background()
	db := openDB(t, t.TempDir())
	defer db.Close()
	w := openWAL(t, db, wal.Config{Queues: []string{"a"}})
	if n, err := w.NextHint(ctx, "a"); err != nil || n != 0 {
		t.Fatalf("empty: %d %v", n, err)
	}
	if _, err := w.Append(ctx, "a", []wal.Record{rec("1"), rec("2")}); err != nil {
		t.Fatal(err)
	}
	if n, err := w.NextHint(ctx, "a"); err != nil || n != 2 {
		t.Fatalf("after 2: %d %v", n, err)
	}
	if _, err := w.NextHint(ctx, "missing"); !errors.Is(err, wal.ErrNoQueue) {
		t.Fatalf("missing: %v", err)
	}
}

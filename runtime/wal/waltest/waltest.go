package waltest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/hostd-dev/hostd/runtime/wal"
)

// Run runs the conformance suite against the logs open returns.
func Run(t *testing.T, open func(t *testing.T) wal.Log) {
	tests := []struct {
		name string
		fn   func(t *testing.T, l wal.Log)
	}{
		{"Empty", testEmpty},
		{"DenseBatches", testDenseBatches},
		{"ReadAcrossRetention", testRetention},
		{"ConcurrentAppenders", testConcurrent},
		{"Sizes", testSizes},
		{"IDs", testIDs},
		{"Wait", testWait},
		{"QueuesDelete", testQueuesDelete},
		{"Seal", testSeal},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) { tc.fn(t, open(t)) })
	}
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func mustCreate(t *testing.T, l wal.Log, q string) {
	t.Helper()
	if err := l.Create(ctxT(t), q); err != nil {
		t.Fatalf("create %q: %v", q, err)
	}
}

func rec(s string) wal.Record { return wal.Record{Payload: []byte(s)} }

func mustAppend(t *testing.T, l wal.Log, q string, recs ...wal.Record) []wal.Entry {
	t.Helper()
	ents, err := l.Append(ctxT(t), q, recs)
	if err != nil {
		t.Fatalf("append to %q: %v", q, err)
	}
	if len(ents) != len(recs) {
		t.Fatalf("append to %q: %d entries for %d records", q, len(ents), len(recs))
	}
	return ents
}

func bounds(t *testing.T, l wal.Log, q string) wal.Bounds {
	t.Helper()
	b, err := l.Bounds(ctxT(t), q)
	if err != nil {
		t.Fatalf("bounds of %q: %v", q, err)
	}
	return b
}

func readAll(t *testing.T, l wal.Log, q string, from uint64) []wal.Entry {
	t.Helper()
	var out []wal.Entry
	for {
		ents, err := l.Read(ctxT(t), q, from, 7)
		if err != nil {
			t.Fatalf("read %q from %d: %v", q, from, err)
		}
		if len(ents) == 0 {
			return out
		}
		out = append(out, ents...)
		from = ents[len(ents)-1].Offset + 1
	}
}

func testEmpty(t *testing.T, l wal.Log) {
	ctx := ctxT(t)
	mustCreate(t, l, "e/0")
	if err := l.Create(ctx, "e/0"); !errors.Is(err, wal.ErrExists) {
		t.Fatalf("second create: %v, want ErrExists", err)
	}
	if b := bounds(t, l, "e/0"); b.Min != 0 || b.Max != 0 {
		t.Fatalf("empty bounds [%d, %d), want [0, 0)", b.Min, b.Max)
	}
	if ents, err := l.Read(ctx, "e/0", 0, 10); err != nil || len(ents) != 0 {
		t.Fatalf("read empty: %v, %v", ents, err)
	}
	if _, err := l.Read(ctx, "e/0", 1, 10); !errors.Is(err, wal.ErrOutOfRange) {
		t.Fatalf("read past max: %v, want ErrOutOfRange", err)
	}
	if _, err := l.Read(ctx, "e/0", 0, 0); !errors.Is(err, wal.ErrInvalid) {
		t.Fatalf("read limit 0: %v, want ErrInvalid", err)
	}
	if _, err := l.Append(ctx, "e/0", nil); !errors.Is(err, wal.ErrInvalid) {
		t.Fatalf("empty append: %v, want ErrInvalid", err)
	}
	if _, err := l.Append(ctx, "e/missing", []wal.Record{rec("x")}); !errors.Is(err, wal.ErrNoQueue) {
		t.Fatalf("append to missing: %v, want ErrNoQueue", err)
	}
	if _, err := l.Read(ctx, "e/missing", 0, 1); !errors.Is(err, wal.ErrNoQueue) {
		t.Fatalf("read missing: %v, want ErrNoQueue", err)
	}
	if _, err := l.Bounds(ctx, "e/missing"); !errors.Is(err, wal.ErrNoQueue) {
		t.Fatalf("bounds of missing: %v, want ErrNoQueue", err)
	}
	if err := l.Create(ctx, ""); !errors.Is(err, wal.ErrInvalid) {
		t.Fatalf("create empty name: %v, want ErrInvalid", err)
	}
	bad := wal.Record{Payload: []byte("x"), Props: map[string]string{"hostd.broadcast.id": "1"}}
	if _, err := l.Append(ctx, "e/0", []wal.Record{bad}); !errors.Is(err, wal.ErrInvalid) {
		t.Fatalf("data record with a reserved property: %v, want ErrInvalid", err)
	}
	if b := bounds(t, l, "e/0"); b.Max != 0 {
		t.Fatalf("failed appends moved max to %d", b.Max)
	}
}

func testDenseBatches(t *testing.T, l wal.Log) {
	const q = "d/0"
	mustCreate(t, l, q)
	var want []wal.Record
	next := uint64(0)
	for _, n := range []int{1, 3, 5, 2} {
		recs := make([]wal.Record, n)
		for i := range recs {
			k := len(want) + i
			recs[i] = wal.Record{Payload: []byte(fmt.Sprintf("m%d", k)), Props: map[string]string{"k": fmt.Sprint(k)}}
			if k%3 == 1 {
				recs[i].Kind = wal.KindBroadcast
				recs[i].Props["hostd.broadcast.id"] = fmt.Sprint(k)
			}
		}
		ents := mustAppend(t, l, q, recs...)
		for i, e := range ents {
			if e.Offset != next {
				t.Fatalf("batch of %d: entry %d at offset %d, want %d", n, i, e.Offset, next)
			}
			next++
		}
		want = append(want, recs...)
	}
	if b := bounds(t, l, q); b.Min != 0 || b.Max != next {
		t.Fatalf("bounds [%d, %d), want [0, %d)", b.Min, b.Max, next)
	}
	got := readAll(t, l, q, 0)
	if len(got) != len(want) {
		t.Fatalf("read %d entries, want %d", len(got), len(want))
	}
	var lastTick uint64
	for i, e := range got {
		w := want[i]
		if e.Offset != uint64(i) || !bytes.Equal(e.Payload, w.Payload) || e.Kind != w.Kind || fmt.Sprint(e.Props) != fmt.Sprint(w.Props) {
			t.Fatalf("entry %d = %+v, want %+v", i, e, w)
		}
		if e.Tick <= lastTick {
			t.Fatalf("entry %d tick %d not above %d", i, e.Tick, lastTick)
		}
		lastTick = e.Tick
	}
	ents, err := l.Read(ctxT(t), q, 4, 2)
	if err != nil || len(ents) != 2 || ents[0].Offset != 4 || ents[1].Offset != 5 {
		t.Fatalf("read(4, 2) = %v, %v", ents, err)
	}
	if mx, err := l.Max(ctxT(t), q); err != nil || mx != next {
		t.Fatalf("Max = %d, %v; want %d", mx, err, next)
	}
	if h, err := l.NextHint(ctxT(t), q); err != nil || h > next {
		t.Fatalf("NextHint = %d, %v; want <= %d", h, err, next)
	}
}

func testRetention(t *testing.T, l wal.Log) {
	ctx := ctxT(t)
	const q = "r/0"
	mustCreate(t, l, q)
	for i := 0; i < 10; i++ {
		mustAppend(t, l, q, rec(fmt.Sprint(i)))
	}
	mn, err := l.Trim(ctx, q, 4)
	if err != nil || mn != 4 {
		t.Fatalf("Trim(4) = %d, %v", mn, err)
	}
	if m, _ := l.Min(ctx, q); m != 4 {
		t.Fatalf("Min after trim = %d, want 4", m)
	}
	if mn, err := l.Trim(ctx, q, 2); err != nil || mn != 4 {
		t.Fatalf("Trim below Min = %d, %v; want 4", mn, err)
	}
	var re *wal.RangeError
	if _, err := l.Read(ctx, q, 3, 5); !errors.As(err, &re) || re.Min != 4 || re.Max != 10 {
		t.Fatalf("read below Min: %v, want RangeError [4, 10)", err)
	}
	got := readAll(t, l, q, 4)
	if len(got) != 6 || got[0].Offset != 4 || string(got[0].Payload) != "4" {
		t.Fatalf("read after trim: %d entries, first %+v", len(got), got[0])
	}
	ents := mustAppend(t, l, q, rec("10"), rec("11"))
	if ents[0].Offset != 10 {
		t.Fatalf("append after trim at %d, want 10 (offsets never renumber)", ents[0].Offset)
	}
	if mn, err := l.Trim(ctx, q, 100); err != nil || mn != 12 {
		t.Fatalf("Trim past Max = %d, %v; want 12", mn, err)
	}
	if b := bounds(t, l, q); b.Min != 12 || b.Max != 12 {
		t.Fatalf("bounds after trimming all: [%d, %d)", b.Min, b.Max)
	}
	if ents := mustAppend(t, l, q, rec("12")); ents[0].Offset != 12 {
		t.Fatalf("append after trimming all at %d, want 12", ents[0].Offset)
	}
}

func testConcurrent(t *testing.T, l wal.Log) {
	const q, writers, calls = "c/0", 6, 15
	mustCreate(t, l, q)
	var wg sync.WaitGroup
	errs := make(chan error, writers)
	for w := 0; w < writers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for c := 0; c < calls; c++ {
				n := 1 + (w+c)%3
				recs := make([]wal.Record, n)
				for i := range recs {
					recs[i] = rec(fmt.Sprintf("%d/%d/%d", w, c, i))
				}
				ents, err := l.Append(context.Background(), q, recs)
				if err != nil {
					errs <- err
					return
				}
				for i := 1; i < len(ents); i++ {
					if ents[i].Offset != ents[0].Offset+uint64(i) {
						errs <- fmt.Errorf("batch not contiguous: %d then %d", ents[i-1].Offset, ents[i].Offset)
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	got := readAll(t, l, q, 0)
	seen := map[string]bool{}
	last := map[int]int{}
	for i, e := range got {
		if e.Offset != uint64(i) {
			t.Fatalf("entry %d at offset %d: offsets not dense", i, e.Offset)
		}
		p := string(e.Payload)
		if seen[p] {
			t.Fatalf("%q appended twice", p)
		}
		seen[p] = true
		var w, c, k int
		fmt.Sscanf(p, "%d/%d/%d", &w, &c, &k)
		if prev, ok := last[w]; ok && c*10+k <= prev {
			t.Fatalf("writer %d's records out of order at offset %d", w, e.Offset)
		}
		last[w] = c*10 + k
	}
	want := 0
	for w := 0; w < writers; w++ {
		for c := 0; c < calls; c++ {
			want += 1 + (w+c)%3
		}
	}
	if len(got) != want {
		t.Fatalf("%d entries, want %d", len(got), want)
	}
}

func testSizes(t *testing.T, l wal.Log) {
	const q = "s/0"
	mustCreate(t, l, q)
	big := bytes.Repeat([]byte("0123456789abcdef"), 64<<10/16)
	ents := mustAppend(t, l, q, wal.Record{Payload: big, Props: map[string]string{"p": "v"}}, rec("small"))
	got := readAll(t, l, q, 0)
	if len(got) != 2 || !bytes.Equal(got[0].Payload, big) || got[1].Offset != ents[1].Offset {
		t.Fatalf("64 KiB record did not round-trip")
	}
	huge := make([]byte, 8<<20)
	if _, err := l.Append(ctxT(t), q, []wal.Record{{Payload: huge}}); !errors.Is(err, wal.ErrTooLarge) {
		t.Fatalf("8 MiB record: %v, want ErrTooLarge", err)
	}
	if b := bounds(t, l, q); b.Max != 2 {
		t.Fatalf("refused record moved Max to %d", b.Max)
	}
}

func testIDs(t *testing.T, l wal.Log) {
	ctx := ctxT(t)
	const q = "i/0"
	mustCreate(t, l, q)
	mustAppend(t, l, q, rec("before"))
	low, err := l.NextHint(ctx, q)
	if err != nil {
		t.Fatal(err)
	}
	recs := []wal.Record{
		{Payload: []byte("a"), ID: "7/t/0", Kind: wal.KindBroadcast},
		{Payload: []byte("b"), ID: "8/t/0", Kind: wal.KindBroadcast},
		{Payload: []byte("c"), ID: "9/t/0", Kind: wal.KindBroadcast},
	}
	first := mustAppend(t, l, q, recs[:2]...)
	mustAppend(t, l, q, rec("other writer"))
	for i, e := range readAll(t, l, q, low) {
		if i < 2 && e.ID != recs[i].ID {
			t.Fatalf("entry %d ID %q, want %q", e.Offset, e.ID, recs[i].ID)
		}
		if i == 2 && e.ID != "" {
			t.Fatalf("record without ID read back with ID %q", e.ID)
		}
	}
	found, err := wal.FindIDs(ctx, l, q, low, []string{"7/t/0", "9/t/0", "8/t/0"})
	if err != nil {
		t.Fatal(err)
	}
	if len(found) != 2 || found["7/t/0"].Offset != first[0].Offset || found["8/t/0"].Offset != first[1].Offset {
		t.Fatalf("FindIDs = %v", found)
	}
	// The batch's outcome was unknown to its writer: AppendOnce appends
	// only the missing record, after the ones already there.
	ents, err := wal.AppendOnce(ctx, l, q, low, recs)
	if err != nil {
		t.Fatal(err)
	}
	if ents[0].Offset != first[0].Offset || ents[1].Offset != first[1].Offset || ents[2].Offset != 4 {
		t.Fatalf("AppendOnce offsets %d %d %d, want %d %d 4", ents[0].Offset, ents[1].Offset, ents[2].Offset, first[0].Offset, first[1].Offset)
	}
	again, err := wal.AppendOnce(ctx, l, q, low, recs)
	if err != nil || again[2].Offset != 4 {
		t.Fatalf("second AppendOnce: %v, %v", again, err)
	}
	if b := bounds(t, l, q); b.Max != 5 {
		t.Fatalf("Max %d after AppendOnce twice, want 5", b.Max)
	}
	if _, err := wal.AppendOnce(ctx, l, q, low, []wal.Record{rec("no id")}); !errors.Is(err, wal.ErrInvalid) {
		t.Fatalf("AppendOnce without ID: %v, want ErrInvalid", err)
	}
}

func testWait(t *testing.T, l wal.Log) {
	ctx := ctxT(t)
	const q = "w/0"
	mustCreate(t, l, q)
	mustAppend(t, l, q, rec("0"))
	if err := l.Wait(ctx, q, 0); err != nil {
		t.Fatalf("Wait for an existing entry: %v", err)
	}
	short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	if err := l.Wait(short, q, 1); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Wait past the end: %v, want deadline", err)
	}
	done := make(chan error, 1)
	go func() { done <- l.Wait(ctx, q, 1) }()
	time.Sleep(30 * time.Millisecond)
	mustAppend(t, l, q, rec("1"))
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Wait: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Wait did not return after an append")
	}
}

func testQueuesDelete(t *testing.T, l wal.Log) {
	ctx := ctxT(t)
	for _, q := range []string{"qa/1", "qa/0", "qb/0"} {
		mustCreate(t, l, q)
	}
	mustAppend(t, l, "qa/1", rec("x"))
	qs, err := l.Queues(ctx, "qa/")
	if err != nil || fmt.Sprint(qs) != "[qa/0 qa/1]" {
		t.Fatalf("Queues(qa/) = %v, %v", qs, err)
	}
	if err := l.Delete(ctx, "qa/1"); err != nil {
		t.Fatal(err)
	}
	if err := l.Delete(ctx, "qa/1"); !errors.Is(err, wal.ErrNoQueue) {
		t.Fatalf("second delete: %v, want ErrNoQueue", err)
	}
	if _, err := l.Bounds(ctx, "qa/1"); !errors.Is(err, wal.ErrNoQueue) {
		t.Fatalf("bounds of deleted: %v, want ErrNoQueue", err)
	}
	qs, err = l.Queues(ctx, "q")
	if err != nil || fmt.Sprint(qs) != "[qa/0 qb/0]" {
		t.Fatalf("Queues(q) = %v, %v", qs, err)
	}
	mustCreate(t, l, "qa/1")
	if b := bounds(t, l, "qa/1"); b.Max != 0 {
		t.Fatalf("re-created queue starts at %d", b.Max)
	}
}

func testSeal(t *testing.T, l wal.Log) {
	sl, ok := l.(wal.Sealer)
	if !ok {
		t.Skip("the log does not implement wal.Sealer")
	}
	ctx := ctxT(t)
	const q = "sl/0"
	mustCreate(t, l, q)
	ents := mustAppend(t, l, q, rec("a"), rec("b"))
	seal, err := sl.Seal(ctx, q)
	if err != nil {
		t.Fatal(err)
	}
	b := bounds(t, l, q)
	if seal.End != b.Max || !b.Sealed || seal.End <= ents[1].Offset || seal.LastTick != ents[1].Tick {
		t.Fatalf("seal %+v, bounds %+v, last entry at %d tick %d", seal, b, ents[1].Offset, ents[1].Tick)
	}
	if _, err := l.Append(ctx, q, []wal.Record{rec("late")}); !errors.Is(err, wal.ErrSealed) {
		t.Fatalf("append after seal: %v, want ErrSealed", err)
	}
	if err := l.Wait(ctx, q, seal.End); !errors.Is(err, wal.ErrSealed) {
		t.Fatalf("Wait at the sealed end: %v, want ErrSealed", err)
	}
	if got := readAll(t, l, q, 0); len(got) != 2 {
		t.Fatalf("read %d entries after seal, want 2", len(got))
	}
	again, err := sl.Seal(ctx, q)
	if err != nil || again.End != seal.End {
		t.Fatalf("second seal %+v, %v; want %+v", again, err, seal)
	}
}

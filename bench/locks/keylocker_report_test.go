package locks

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/hostd-dev/hostd/bench/report"
	hlocks "github.com/hostd-dev/hostd/builtin/locks"
	"github.com/hostd-dev/hostd/sdk/abi"
)

// TestReportKeyLocker measures issue 5's in-process resource-key locker —
// uncontended lock+unlock of one exclusive and one shared key, the shape of
// a broadcast's resource keys — beside the naive per-key mutex table
// (a map of sync.Mutex/RWMutex, one per key, looked up and locked in the
// same order), run in the same process, and emits both as rows of the
// benchmark report. Issue 5 sets no target for it.
func TestReportKeyLocker(t *testing.T) {
	ns := func(r testing.BenchmarkResult) float64 { return float64(r.T.Nanoseconds()) / float64(max(r.N, 1)) }
	ctx := context.Background()
	l := hlocks.NewKeyLocker(hlocks.KeyLockerOptions{})
	keys := []abi.ResourceKey{{Domain: "collection", Key: "db.c1", Mode: abi.Exclusive}, {Domain: "database", Key: "db", Mode: abi.Shared}}
	var failed atomic.Value
	one := ns(testing.Benchmark(func(b *testing.B) {
		for b.Loop() {
			g, err := l.Lock(ctx, "bench", keys)
			if err != nil {
				failed.Store(err)
				return
			}
			g.Unlock()
		}
	}))
	var n atomic.Int64
	par := ns(testing.Benchmark(func(b *testing.B) {
		b.RunParallel(func(pb *testing.PB) {
			ks := []abi.ResourceKey{{Domain: "collection", Key: fmt.Sprint(n.Add(1)), Mode: abi.Exclusive}, {Domain: "cluster", Key: "c", Mode: abi.Shared}}
			for pb.Next() {
				g, err := l.Lock(ctx, "bench", ks)
				if err != nil {
					failed.Store(err)
					return
				}
				g.Unlock()
			}
		})
	}))
	if err, _ := failed.Load().(error); err != nil {
		t.Fatal(err)
	}

	// The baseline: a table of per-key mutexes under one lock.
	var mu sync.Mutex
	ex, shr := map[string]*sync.Mutex{}, map[string]*sync.RWMutex{}
	lockNaive := func(exKey, shKey string) func() {
		mu.Lock()
		e, ok := ex[exKey]
		if !ok {
			e = new(sync.Mutex)
			ex[exKey] = e
		}
		s, ok := shr[shKey]
		if !ok {
			s = new(sync.RWMutex)
			shr[shKey] = s
		}
		mu.Unlock()
		e.Lock()
		s.RLock()
		return func() { s.RUnlock(); e.Unlock() }
	}
	naive := ns(testing.Benchmark(func(b *testing.B) {
		for b.Loop() {
			lockNaive("collection/db.c1", "database/db")()
		}
	}))
	naivePar := ns(testing.Benchmark(func(b *testing.B) {
		b.RunParallel(func(pb *testing.PB) {
			k := fmt.Sprint("collection/", n.Add(1))
			for pb.Next() {
				lockNaive(k, "cluster/c")()
			}
		})
	}))
	rows := []report.Row{
		{Bench: "locks", Figure: "in-process resource-key locker: uncontended lock+unlock (1 exclusive + 1 shared key)", Value: one, Unit: "ns/op",
			Baseline: "per-key sync.Mutex/RWMutex table, same keys", BaseVal: naive, Note: "no target in issue 5; the baseline never removes a key's entry, the locker does"},
		{Bench: "locks", Figure: "in-process resource-key locker: parallel, distinct exclusive keys", Value: par, Unit: "ns/op",
			Baseline: "per-key mutex table, parallel, distinct keys", BaseVal: naivePar, Note: "b.RunParallel on every CPU; ns per op of the whole process"},
	}
	if err := report.Emit(t.Logf, rows...); err != nil {
		t.Fatal(err)
	}
}

package locks

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/hostd-dev/hostd/runtime/catalog"
	"github.com/hostd-dev/hostd/runtime/sched"
	"github.com/hostd-dev/hostd/sdk/abi"
)

// BenchmarkLeasePairs: in-process acquire+release on distinct keys with a
// fsynced Badger catalog, 1 and 64 concurrent callers (pairs/s).
func BenchmarkLeasePairs(b *testing.B) {
	for _, clients := range []int{1, 64} {
		b.Run(fmt.Sprint("c=", clients), func(b *testing.B) {
			db, err := catalog.Open(catalog.DefaultOptions(b.TempDir()))
			if err != nil {
				b.Fatal(err)
			}
			defer db.Close()
			svc, err := Open(context.Background(), Options{Store: db, Clock: sched.Real})
			if err != nil {
				b.Fatal(err)
			}
			defer svc.Close()
			var next atomic.Int64
			var wg sync.WaitGroup
			b.ResetTimer()
			for w := 0; w < clients; w++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					keys := []abi.ResourceKey{ex("bench", fmt.Sprint(w))}
					for next.Add(1) <= int64(b.N) {
						g, err := svc.Acquire(context.Background(), AcquireRequest{Owner: "b", Keys: keys})
						if err != nil {
							b.Error(err)
							return
						}
						if err := svc.Release(context.Background(), g.ID, g.Token); err != nil {
							b.Error(err)
							return
						}
					}
				}()
			}
			wg.Wait()
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "pairs/s")
			st := db.Stats()
			b.ReportMetric(float64(st.Writers)/float64(max(st.Rounds, 1)), "writers/round")
		})
	}
}

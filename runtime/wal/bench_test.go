package wal_test

import (
	"context"
	"testing"

	"github.com/hostd-dev/hostd/runtime/wal"
)

// BenchmarkAppend measures durable single-record appends to one queue
// from parallel callers (group commit) and from one caller (one fsync per
// append).
func BenchmarkAppend(b *testing.B) {
	for _, par := range []struct {
		name string
		run  func(b *testing.B, w *wal.WAL)
	}{
		{"serial", func(b *testing.B, w *wal.WAL) {
			for i := 0; i < b.N; i++ {
				if _, err := w.Append(context.Background(), "q", []wal.Record{{Payload: make([]byte, 100)}}); err != nil {
					b.Fatal(err)
				}
			}
		}},
		{"parallel64", func(b *testing.B, w *wal.WAL) {
			b.SetParallelism(32) // 32 × GOMAXPROCS callers
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if _, err := w.Append(context.Background(), "q", []wal.Record{{Payload: make([]byte, 100)}}); err != nil {
						b.Error(err)
						return
					}
				}
			})
		}},
	} {
		b.Run(par.name, func(b *testing.B) {
			db := openDB(b, b.TempDir())
			defer db.Close()
			w := openWAL(b, db, wal.Config{Queues: []string{"q"}})
			b.ResetTimer()
			par.run(b, w)
		})
	}
}

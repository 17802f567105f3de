package mapping

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/hostd-dev/hostd/builtin/mapping"
	"github.com/hostd-dev/hostd/runtime/catalog"
	"github.com/hostd-dev/hostd/runtime/wal"
)

var ctx = context.Background()

// countingStore counts the bytes (keys + values) and ops every commit writes.
type countingStore struct {
	catalog.Store
	bytes atomic.Int64
	ops   atomic.Int64
}

func (s *countingStore) Commit(ctx context.Context, b *catalog.Batch) (catalog.Version, error) {
	var n int64
	for _, op := range b.Ops {
		n += int64(len(op.Key) + len(op.Value))
	}
	s.bytes.Add(n)
	s.ops.Add(int64(len(b.Ops)))
	return s.Store.Commit(ctx, b)
}

func brokers(n, from int) []mapping.Broker {
	out := make([]mapping.Broker, n)
	for i := range out {
		out[i] = mapping.Broker{Name: fmt.Sprintf("b%03d", from+i)}
	}
	return out
}

func names(bs []mapping.Broker) []string {
	out := make([]string, len(bs))
	for i, b := range bs {
		out[i] = b.Name
	}
	return out
}

func open(b testing.TB, dir string, bs []mapping.Broker) (*mapping.Mapping, *countingStore) {
	b.Helper()
	var db *catalog.DB
	var err error
	if dir == "" {
		db, err = catalog.OpenMemory()
	} else {
		o := catalog.DefaultOptions(dir)
		o.GCInterval = 0
		db, err = catalog.Open(o)
	}
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { db.Close() })
	cs := &countingStore{Store: db}
	w, err := wal.Open(ctx, wal.Config{Store: cs})
	if err != nil {
		b.Fatal(err)
	}
	m, err := mapping.Open(ctx, mapping.Config{Store: cs, WAL: w, Brokers: bs})
	if err != nil {
		b.Fatal(err)
	}
	return m, cs
}

func apply(b testing.TB, m *mapping.Mapping, c mapping.Change) *mapping.Plan {
	p, err := m.Apply(ctx, c)
	if err != nil {
		b.Fatal(err)
	}
	return p
}

func BenchmarkTranslate(b *testing.B) {
	for _, segs := range []int{1, 10, 1000} {
		b.Run(fmt.Sprintf("segments=%d", segs), func(b *testing.B) {
			m, _ := open(b, b.TempDir(), brokers(2, 0))
			apply(b, m, mapping.Change{Kind: mapping.KindCreate, Topic: "t", Queues: 1, Brokers: []string{"b000"}})
			for i := 1; i < segs; i++ {
				if _, err := m.Append(ctx, "t/0", []wal.Record{{Payload: []byte("x")}}); err != nil {
					b.Fatal(err)
				}
				apply(b, m, mapping.Change{Kind: mapping.KindRemap, Topic: "t", Brokers: []string{fmt.Sprintf("b%03d", i%2)}})
			}
			if _, err := m.Append(ctx, "t/0", []wal.Record{{Payload: []byte("x")}}); err != nil {
				b.Fatal(err)
			}
			ti, err := m.Describe(ctx, "t")
			if err != nil || len(ti.Queues[0].Segments) != segs {
				b.Fatalf("built %d segments, want %d (%v)", len(ti.Queues[0].Segments), segs, err)
			}
			max := uint64(segs)
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if _, _, err := m.LogicToPhysical(ctx, "t/0", uint64(i)%max); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
	b.Run("baseline=map-lookup", func(b *testing.B) {
		mp := map[string]uint64{"t/0": 1}
		var sink uint64
		for i := 0; i < b.N; i++ {
			sink += mp["t/0"] + uint64(i)
		}
		_ = sink
	})
}

func BenchmarkRemap10k(b *testing.B) {
	const queues = 10000
	all := brokers(150, 0)
	m, cs := open(b, b.TempDir(), all)
	apply(b, m, mapping.Change{Kind: mapping.KindCreate, Topic: "big", Queues: queues, Brokers: names(all[:100])})
	b.ResetTimer()
	var bytes int64
	moved := 0
	for i := 0; i < b.N; i++ {
		// Alternate between brokers 0..99 and 50..149: 5,000 queues move.
		target := all[50:150]
		if i%2 == 1 {
			target = all[:100]
		}
		before := cs.bytes.Load()
		p := apply(b, m, mapping.Change{Kind: mapping.KindRemap, Topic: "big", Brokers: names(target)})
		bytes += cs.bytes.Load() - before
		moved += len(p.Moved)
	}
	b.ReportMetric(float64(bytes)/float64(b.N), "catalog-bytes/remap")
	b.ReportMetric(float64(moved)/float64(b.N), "moved/remap")
}

func BenchmarkRead(b *testing.B) {
	m, _ := open(b, "", brokers(2, 0))
	apply(b, m, mapping.Change{Kind: mapping.KindCreate, Topic: "t", Queues: 1, Brokers: []string{"b000"}})
	fill := func() {
		recs := make([]wal.Record, 500)
		for i := range recs {
			recs[i] = wal.Record{Payload: make([]byte, 100)}
		}
		for i := 0; i < 4; i++ {
			if _, err := m.Append(ctx, "t/0", recs); err != nil {
				b.Fatal(err)
			}
		}
	}
	fill() // 0..1999 on b000
	apply(b, m, mapping.Change{Kind: mapping.KindRemap, Topic: "t", Brokers: []string{"b001"}})
	fill() // 2000..3999 on b001
	for _, c := range []struct {
		name string
		from uint64
	}{{"within-segment", 500}, {"across-boundary", 1950}} {
		b.Run(c.name, func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				msgs, err := m.Read(ctx, "t/0", c.from, 100)
				if err != nil || len(msgs) != 100 {
					b.Fatalf("read %d: %v", len(msgs), err)
				}
			}
			b.ReportMetric(float64(b.N*100)/b.Elapsed().Seconds(), "msgs/s")
		})
	}
}

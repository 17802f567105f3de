package mapping_test

import (
	"flag"
	"fmt"
	"os"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/hostd-dev/hostd/builtin/mapping"
	"github.com/hostd-dev/hostd/runtime/catalog"
	"github.com/hostd-dev/hostd/runtime/wal"
)

// TestPropertyMapping: random sequences of create/grow/remap/append/read/
// retention keep the invariants (checked by every Refresh and by a fresh
// Open at the end), and every reader sees each logic queue as one
// gap-free, duplicate-free sequence equal to what was appended.
func TestPropertyMapping(t *testing.T) {
	// 30 random runs by default (seconds, also under -race); HOSTD_LONG=1
	// or -rapid.checks=N for more.
	if f := flag.Lookup("rapid.checks"); f != nil && f.Value.String() == f.DefValue && os.Getenv("HOSTD_LONG") != "1" {
		_ = f.Value.Set("30")
	}
	rapid.Check(t, func(rt *rapid.T) {
		db, err := catalog.OpenMemory()
		if err != nil {
			rt.Fatal(err)
		}
		defer db.Close()
		clk := &fakeClock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
		w, err := wal.Open(ctx, wal.Config{Store: db, Clock: clk})
		if err != nil {
			rt.Fatal(err)
		}
		all := []string{"a", "b", "c", "d"}
		cfg := mapping.Config{Store: db, WAL: w, Brokers: brokers(all...), Clock: clk}
		m, err := mapping.Open(ctx, cfg)
		if err != nil {
			rt.Fatal(err)
		}
		model := map[string][]string{} // vchannel → payloads at logic offsets 0..
		mins := map[string]uint64{}
		queues := map[string]int{}
		n := 0
		subset := func(rt *rapid.T, label string) []string {
			s := rapid.SliceOfNDistinct(rapid.SampledFrom(all), 1, 4, rapid.ID[string]).Draw(rt, label)
			return s
		}
		rt.Repeat(map[string]func(*rapid.T){
			"create": func(rt *rapid.T) {
				topic := rapid.SampledFrom([]string{"x", "y"}).Draw(rt, "topic")
				if queues[topic] > 0 {
					rt.Skip("exists")
				}
				q := rapid.IntRange(1, 4).Draw(rt, "queues")
				var ret *mapping.Retention
				if rapid.Bool().Draw(rt, "retention") {
					ret = &mapping.Retention{MaxBytes: uint64(rapid.IntRange(100, 600).Draw(rt, "bytes")), MaxAge: time.Duration(rapid.IntRange(0, 5).Draw(rt, "age")) * time.Minute}
				}
				if _, err := m.Apply(ctx, mapping.Change{Kind: mapping.KindCreate, Topic: topic, Queues: q, Brokers: subset(rt, "brokers"), Retention: ret}); err != nil {
					rt.Fatal(err)
				}
				queues[topic] = q
			},
			"grow": func(rt *rapid.T) {
				topic := rapid.SampledFrom([]string{"x", "y"}).Draw(rt, "topic")
				if queues[topic] == 0 {
					rt.Skip("no topic")
				}
				q := queues[topic] + rapid.IntRange(1, 3).Draw(rt, "more")
				if _, err := m.Apply(ctx, mapping.Change{Kind: mapping.KindGrow, Topic: topic, Queues: q, Brokers: subset(rt, "brokers")}); err != nil {
					rt.Fatal(err)
				}
				queues[topic] = q
			},
			"remap": func(rt *rapid.T) {
				topic := rapid.SampledFrom([]string{"x", "y", mapping.ControlTopic}).Draw(rt, "topic")
				if topic != mapping.ControlTopic && queues[topic] == 0 {
					rt.Skip("no topic")
				}
				if _, err := m.Apply(ctx, mapping.Change{Kind: mapping.KindRemap, Topic: topic, Brokers: subset(rt, "brokers")}); err != nil {
					rt.Fatal(err)
				}
			},
			"append": func(rt *rapid.T) {
				topic := rapid.SampledFrom([]string{"x", "y", mapping.ControlTopic}).Draw(rt, "topic")
				nq := queues[topic]
				if topic == mapping.ControlTopic {
					nq = 1
				}
				if nq == 0 {
					rt.Skip("no topic")
				}
				vc := mapping.VChannel(topic, rapid.IntRange(0, nq-1).Draw(rt, "queue"))
				k := rapid.IntRange(1, 3).Draw(rt, "records")
				recs := make([]wal.Record, k)
				for i := range recs {
					n++
					recs[i] = wal.Record{Payload: []byte(fmt.Sprintf("m%d", n))}
				}
				clk.Add(time.Duration(rapid.IntRange(0, 90).Draw(rt, "seconds")) * time.Second)
				pos, err := m.Append(ctx, vc, recs)
				if err != nil {
					rt.Fatal(err)
				}
				for i, p := range pos {
					if p.Offset != uint64(len(model[vc])) {
						rt.Fatalf("%s: appended at %d, expected %d", vc, p.Offset, len(model[vc]))
					}
					model[vc] = append(model[vc], string(recs[i].Payload))
				}
			},
			"retention": func(rt *rapid.T) {
				if _, err := m.ApplyRetention(ctx); err != nil {
					rt.Fatal(err)
				}
			},
			"": func(rt *rapid.T) {
				// Invariant check after every action: each logic queue is
				// the model's sequence from its min on, gap-free.
				for vc, want := range model {
					min, max, err := m.Bounds(ctx, vc)
					if err != nil {
						rt.Fatal(err)
					}
					if max != uint64(len(want)) || min < mins[vc] || min > max {
						rt.Fatalf("%s: bounds [%d,%d), model %d, previous min %d", vc, min, max, len(want), mins[vc])
					}
					mins[vc] = min
					from := min
					for from < max {
						msgs, err := m.Read(ctx, vc, from, 4)
						if err != nil {
							rt.Fatal(err)
						}
						if len(msgs) == 0 {
							rt.Fatalf("%s: empty read at %d < %d", vc, from, max)
						}
						for _, msg := range msgs {
							if msg.Offset != from || string(msg.Payload) != want[from] {
								rt.Fatalf("%s: offset %d holds %q (offset %d), want %q", vc, from, msg.Payload, msg.Offset, want[from])
							}
							from++
						}
					}
				}
			},
		})
		// A fresh Open re-checks every invariant across all topics.
		if _, err := mapping.Open(ctx, cfg); err != nil {
			rt.Fatal(err)
		}
	})
}

package catalog

import (
	"context"
	"fmt"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/hostd-dev/hostd/runtime/sched"
)

// TestValueLogGCRunsPeriodically drives the GC loop with a fake clock,
// checks discarding respects open snapshots, and that metrics flow through
// the OTel API.
func TestValueLogGCRunsPeriodically(t *testing.T) {
	ctx := context.Background()
	clock := sched.NewFakeClock(time.Unix(0, 0))
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	o := testOptions(t.TempDir())
	o.Clock = clock
	o.GCInterval = time.Minute
	o.ValueLogFileSize = 1 << 20
	o.MeterProvider = mp
	db, err := Open(o)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	val := make([]byte, 128<<10)
	for i := 0; i < 30; i++ {
		val[0] = byte(i)
		if _, err := db.Commit(ctx, &Batch{Ops: []Op{{Key: []byte(fmt.Sprintf("big/%d", i%2)), Value: val}}}); err != nil {
			t.Fatal(err)
		}
	}
	// The loop runs once per interval on the injected clock.
	for tick := uint64(1); tick <= 3; tick++ {
		clock.BlockUntil(1)
		if got := db.gcRuns.Load(); got != tick-1 {
			t.Fatalf("before tick %d: %d GC runs", tick, got)
		}
		clock.Advance(time.Minute)
		waitFor(t, func() bool { return db.gcRuns.Load() == tick })
	}
	if _, err := db.RunGC(); err != nil {
		t.Fatalf("RunGC: %v", err)
	}
	// Old versions may be discarded only below every open snapshot.
	release := make(chan struct{})
	viewTs := make(chan uint64)
	go db.View(ctx, func(Reader) error {
		viewTs <- uint64(db.Version())
		<-release
		return nil
	})
	ts := <-viewTs
	db.Commit(ctx, &Batch{Ops: []Op{put("after-view", "x")}})
	if d := db.discardTs(); d != ts {
		t.Fatalf("discard ts %d with a snapshot open at %d", d, ts)
	}
	close(release)
	waitFor(t, func() bool { return db.discardTs() == uint64(db.Version()) })
	for i := 0; i < 2; i++ {
		v, _, err := get(t, db, fmt.Sprintf("big/%d", i))
		if err != nil || len(v) != len(val) || v[0] != byte(28+i) {
			t.Fatalf("big/%d after GC: %d bytes, %v", i, len(v), err)
		}
	}
	// Metrics were recorded through the OTel API.
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(ctx, &rm); err != nil {
		t.Fatal(err)
	}
	got := map[string]int64{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			switch d := m.Data.(type) {
			case metricdata.Sum[int64]:
				for _, p := range d.DataPoints {
					got[m.Name] += p.Value
				}
			case metricdata.Histogram[int64]:
				for _, p := range d.DataPoints {
					got[m.Name] += int64(p.Count)
				}
			case metricdata.Histogram[float64]:
				for _, p := range d.DataPoints {
					if v, ok := p.Attributes.Value(attribute.Key("failed")); ok && !v.AsBool() {
						got[m.Name] += int64(p.Count)
					}
				}
			}
		}
	}
	for _, name := range []string{"hostd.catalog.commit.rounds", "hostd.catalog.commit.txns", "hostd.catalog.commit.writers", "hostd.catalog.commit.duration"} {
		if got[name] == 0 {
			t.Errorf("metric %s not recorded (got %v)", name, got)
		}
	}
	if got["hostd.catalog.commit.rounds"] != int64(db.Stats().Rounds) {
		t.Errorf("rounds metric %d, Stats %d", got["hostd.catalog.commit.rounds"], db.Stats().Rounds)
	}
}

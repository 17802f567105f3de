package mapping_test

import (
	"errors"
	"strconv"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/hostd-dev/hostd/builtin/mapping"
	"github.com/hostd-dev/hostd/runtime/wal"
)

// TestTranslateBothWays: every logic offset of a queue remapped twice
// translates to its segment and physical offset, and the physical offset
// translates back to the same logic offset; trimmed-but-mapped offsets
// say Retained false; offsets and queues that are not mapped are typed
// errors; each call has a span and is counted.
func TestTranslateBothWays(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	reader := sdkmetric.NewManualReader()
	clk := &fakeClock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	e := newEnv(t, mapping.Config{Brokers: brokers("a", "b", "c"), Clock: clk,
		TracerProvider: sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec)),
		MeterProvider:  sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))})
	// A retention bound that never expires anything here: a pass only
	// drops closed segments whose data is gone.
	e.apply(t, mapping.Change{Kind: mapping.KindCreate, Topic: "t", Queues: 2, Brokers: []string{"a"},
		Retention: &mapping.Retention{MaxAge: 1000 * time.Hour}})
	e.appendN(t, "t/1", 4, "a")
	e.apply(t, mapping.Change{Kind: mapping.KindRemap, Topic: "t", Brokers: []string{"b"}})
	e.appendN(t, "t/1", 3, "b")
	e.apply(t, mapping.Change{Kind: mapping.KindRemap, Topic: "t", Brokers: []string{"c"}})
	e.appendN(t, "t/1", 2, "c")

	wantBroker := []string{"a", "a", "a", "a", "b", "b", "b", "c", "c"}
	wantPhys := []uint64{0, 1, 2, 3, 0, 1, 2, 0, 1}
	msgs := e.readAll(t, "t/1", 0)
	for off := uint64(0); off < 9; off++ {
		tr, err := e.m.TranslateLogic(ctx, "t/1", off)
		if err != nil {
			t.Fatalf("logic %d: %v", off, err)
		}
		if tr.Broker != wantBroker[off] || tr.PhysicalOffset != wantPhys[off] || tr.LogicOffset != off || !tr.Retained ||
			tr.VChannel != "t/1" || tr.Topic != "t" || tr.Queue != 1 || tr.Min != 0 || tr.Max != 9 {
			t.Fatalf("logic %d: %+v", off, tr)
		}
		if tr.PhysicalQueue != msgs[off].Queue || tr.PhysicalOffset != msgs[off].QueueOffset {
			t.Fatalf("logic %d: translation %s@%d, read says %s@%d", off, tr.PhysicalQueue, tr.PhysicalOffset, msgs[off].Queue, msgs[off].QueueOffset)
		}
		if open := off >= 7; tr.Segment.Open != open || tr.SegmentIndex != map[string]int{"a": 0, "b": 1, "c": 2}[tr.Broker] {
			t.Fatalf("logic %d: segment %d %+v", off, tr.SegmentIndex, tr.Segment)
		}
		back, err := e.m.TranslatePhysical(ctx, tr.Broker, tr.QueueID, tr.PhysicalOffset)
		if err != nil || back.VChannel != "t/1" || back.LogicOffset != off || back.SegmentIndex != tr.SegmentIndex {
			t.Fatalf("physical %s@%d back: %+v %v", tr.PhysicalQueue, tr.PhysicalOffset, back, err)
		}
	}

	// Not mapped: at max, far beyond, another queue's empty range.
	var re *mapping.RangeError
	for _, off := range []uint64{9, 1 << 40} {
		if _, err := e.m.TranslateLogic(ctx, "t/1", off); !errors.As(err, &re) || re.Min != 0 || re.Max != 9 || !errors.Is(err, mapping.ErrOutOfRange) {
			t.Fatalf("logic %d: %v", off, err)
		}
	}
	if _, err := e.m.TranslateLogic(ctx, "t/0", 0); !errors.As(err, &re) || re.Max != 0 {
		t.Fatalf("empty queue: %v", err)
	}
	for vc, want := range map[string]error{"t/2": wal.ErrNoChannel, "nope/0": wal.ErrNoChannel, "t": mapping.ErrInvalid, "t/01": mapping.ErrInvalid} {
		if _, err := e.m.TranslateLogic(ctx, vc, 0); !errors.Is(err, want) {
			t.Fatalf("TranslateLogic(%q) = %v, want %v", vc, err, want)
		}
	}
	first, _ := e.m.TranslateLogic(ctx, "t/1", 0)
	mid, _ := e.m.TranslateLogic(ctx, "t/1", 4)
	lead, _ := e.m.TranslateLogic(ctx, "t/1", 7)
	var pre *mapping.PhysicalRangeError
	if _, err := e.m.TranslatePhysical(ctx, "b", mid.QueueID, 3); !errors.As(err, &pre) || pre.Start != 0 || pre.End != 3 || pre.VChannel != "t/1" {
		t.Fatalf("physical past a closed segment: %v", err)
	}
	if _, err := e.m.TranslatePhysical(ctx, "c", lead.QueueID, 2); !errors.As(err, &pre) || pre.End != 2 {
		t.Fatalf("physical at the leader's end: %v", err)
	}
	if _, err := e.m.TranslatePhysical(ctx, "a", 999999, 0); !errors.Is(err, mapping.ErrNotFound) {
		t.Fatalf("unmapped physical queue: %v", err)
	}
	if _, err := e.m.TranslatePhysical(ctx, "b", first.QueueID, 0); !errors.Is(err, mapping.ErrNotFound) {
		t.Fatalf("physical queue on the wrong broker: %v", err)
	}
	if _, err := e.m.TranslatePhysical(ctx, "a b", 1, 0); !errors.Is(err, mapping.ErrInvalid) {
		t.Fatalf("bad broker name: %v", err)
	}

	// Retention trims half of the first segment: still mapped, not retained.
	if _, err := e.w.Trim(ctx, first.PhysicalQueue, 2); err != nil {
		t.Fatal(err)
	}
	for off, retained := range []bool{false, false, true, true} {
		tr, err := e.m.TranslateLogic(ctx, "t/1", uint64(off))
		if err != nil || tr.Retained != retained || tr.Min != 2 {
			t.Fatalf("logic %d after trim: %+v %v", off, tr, err)
		}
	}
	// All of it gone and the segment dropped: no longer mapped either way.
	if _, err := e.w.Trim(ctx, first.PhysicalQueue, 4); err != nil {
		t.Fatal(err)
	}
	rep, err := e.m.ApplyRetention(ctx)
	if err != nil || rep.Dropped != 1 {
		t.Fatalf("retention: %+v %v", rep, err)
	}
	if _, err := e.m.TranslateLogic(ctx, "t/1", 3); !errors.As(err, &re) || re.Min != 4 || re.Max != 9 {
		t.Fatalf("logic offset of a dropped segment: %v", err)
	}
	if _, err := e.m.TranslatePhysical(ctx, "a", first.QueueID, 3); !errors.Is(err, mapping.ErrNotFound) {
		t.Fatalf("physical queue of a dropped segment: %v", err)
	}
	if tr, err := e.m.TranslateLogic(ctx, "t/1", 4); err != nil || tr.SegmentIndex != 0 || tr.Broker != "b" {
		t.Fatalf("first mapped offset after the drop: %+v %v", tr, err)
	}

	// Spans and the operation counter.
	spans := map[string]int{}
	for _, s := range rec.Ended() {
		spans[s.Name()]++
	}
	if spans["mapping.translate.logic"] < 9 || spans["mapping.translate.physical"] < 9 {
		t.Fatalf("spans: %v", spans)
	}
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(ctx, &rm); err != nil {
		t.Fatal(err)
	}
	counted := map[string]int64{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name != "hostd.mapping.operations" {
				continue
			}
			for _, dp := range m.Data.(metricdata.Sum[int64]).DataPoints {
				op, _ := dp.Attributes.Value(attribute.Key("op"))
				ok, _ := dp.Attributes.Value(attribute.Key("ok"))
				counted[op.AsString()+"/"+strconv.FormatBool(ok.AsBool())] += dp.Value
			}
		}
	}
	if counted["translate.logic/true"] < 9 || counted["translate.logic/false"] < 4 || counted["translate.physical/false"] < 4 {
		t.Fatalf("operation counts: %v", counted)
	}
}

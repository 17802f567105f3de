package locks

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/hostd-dev/hostd/sdk/abi"
)

// Every lease operation has a span (with its result) and is counted by
// op and result code; the gauges report grants.
func TestLeaseSpansAndMetrics(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	dir := t.TempDir()
	db := openStore(t, dir, false)
	defer db.Close()
	clk := newFakeClock()
	svc, err := Open(context.Background(), Options{Store: db, Clock: clk, TracerProvider: tp, MeterProvider: mp})
	if err != nil {
		t.Fatal(err)
	}
	defer svc.Close()
	ctx := context.Background()
	k := ex("t", "k")
	g, err := svc.Acquire(ctx, AcquireRequest{Owner: "o", Keys: []abi.ResourceKey{k}})
	if err != nil {
		t.Fatal(err)
	}
	_, _ = svc.Acquire(ctx, AcquireRequest{Owner: "p", Keys: []abi.ResourceKey{k}}) // locked
	if _, err := svc.Renew(ctx, g.ID, g.Token, time.Minute); err != nil {
		t.Fatal(err)
	}
	_ = svc.CheckFence(k, g.Fence)
	if _, err := svc.ForceRelease(ctx, k, "", "test", "me"); err != nil {
		t.Fatal(err)
	}
	_ = svc.Release(ctx, g.ID, g.Token) // not_holder

	results := map[string]string{}
	for _, s := range rec.Ended() {
		for _, a := range s.Attributes() {
			if a.Key == "locks.result" {
				results[s.Name()] += a.Value.AsString() + " "
			}
		}
	}
	want := map[string]string{
		"locks.acquire":       "ok locked ",
		"locks.renew":         "ok ",
		"locks.force_release": "ok ",
		"locks.release":       "not_holder ",
	}
	for name, w := range want {
		if results[name] != w {
			t.Errorf("span %s results %q, want %q (all: %v)", name, results[name], w, results)
		}
	}

	var rm metricdata.ResourceMetrics
	if err := reader.Collect(ctx, &rm); err != nil {
		t.Fatal(err)
	}
	counts := map[string]int64{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name != "hostd.locks.ops" {
				continue
			}
			for _, dp := range m.Data.(metricdata.Sum[int64]).DataPoints {
				op, _ := dp.Attributes.Value(attribute.Key("op"))
				res, _ := dp.Attributes.Value(attribute.Key("result"))
				counts[op.AsString()+"/"+res.AsString()] += dp.Value
			}
		}
	}
	for _, key := range []string{"acquire/ok", "acquire/locked", "renew/ok", "check_fence/ok", "force_release/ok", "release/not_holder"} {
		if counts[key] != 1 {
			t.Errorf("hostd.locks.ops{%s} = %d, want 1 (all: %v)", key, counts[key], counts)
		}
	}
}

// The metric attribute sets are built once for every op and result code;
// a code or op missing from those tables would still be recorded, but
// with a per-call attribute set: keep the tables complete.
func TestLeaseMetricTablesComplete(t *testing.T) {
	errs := []error{nil, ErrLocked, ErrNotHolder, ErrExpired, ErrTTLTooLong, ErrInvalidKey, ErrCanceled,
		context.Canceled, ErrInvalid, ErrNotFound, ErrClosed, errors.New("other")}
	for _, err := range errs {
		if code := ErrorCode(err); !slices.Contains(resultCodes, code) {
			t.Errorf("ErrorCode(%v) = %q is not in resultCodes", err, code)
		}
	}
	m := newLeaseMetrics(nil, nil)
	for _, op := range leaseOps {
		for _, code := range resultCodes {
			if len(m.opSets[op][code]) != 1 {
				t.Errorf("no attribute set for %s/%s", op, code)
			}
		}
	}
}

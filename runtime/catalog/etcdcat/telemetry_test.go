package etcdcat

import (
	"context"
	"errors"
	"io"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/hostd-dev/hostd/runtime/catalog"
)

// testTelemetry: the Badger catalog's span and metric names, marked with
// the etcd backend.
func testTelemetry(t *testing.T, cli *clientv3.Client) {
	ctx := context.Background()
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	s := openOn(t, cli, func(o *Options) { o.TracerProvider = tp; o.MeterProvider = mp })
	ver, err := s.Commit(ctx, &catalog.Batch{Ops: []catalog.Op{put("s/1", "v")}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Commit(ctx, &catalog.Batch{Checks: []catalog.Check{{Key: []byte("s/1"), Version: ver + 5}}}); !errors.Is(err, catalog.ErrConflict) {
		t.Fatal(err)
	}
	if _, err := s.Backup(ctx, io.Discard); err != nil {
		t.Fatal(err)
	}
	var commits, backups int
	for _, sp := range rec.Ended() {
		attrs := map[attribute.Key]attribute.Value{}
		for _, kv := range sp.Attributes() {
			attrs[kv.Key] = kv.Value
		}
		if attrs["catalog.backend"].AsString() != "etcd" {
			t.Errorf("span %s lacks catalog.backend=etcd: %v", sp.Name(), attrs)
		}
		switch sp.Name() {
		case "catalog.Commit":
			commits++
			if commits == 1 && attrs["catalog.version"].AsInt64() != int64(ver) {
				t.Errorf("first commit attrs %v", attrs)
			}
			if commits == 2 && sp.Status().Code != codes.Error {
				t.Errorf("conflicting commit span status %v", sp.Status())
			}
		case "catalog.Backup":
			backups++
		}
	}
	if commits != 2 || backups != 1 {
		t.Fatalf("spans: %d commits, %d backups", commits, backups)
	}
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(ctx, &rm); err != nil {
		t.Fatal(err)
	}
	got := map[string]int64{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if sum, ok := m.Data.(metricdata.Sum[int64]); ok {
				for _, dp := range sum.DataPoints {
					if v, _ := dp.Attributes.Value("backend"); v.AsString() == "etcd" {
						got[m.Name] += dp.Value
					}
				}
			}
		}
	}
	st := s.Stats()
	if got["hostd.catalog.commit.rounds"] != int64(st.Rounds) || got["hostd.catalog.commit.conflicts"] != 1 || got["hostd.catalog.commit.txns"] != int64(st.Txns) {
		t.Fatalf("metrics %v, stats %+v", got, st)
	}
}

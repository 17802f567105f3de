package catalog

import (
	"context"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

const meterName = "github.com/hostd-dev/hostd/runtime/catalog"

type metrics struct {
	rounds     metric.Int64Counter
	txns       metric.Int64Counter
	writers    metric.Int64Histogram
	latency    metric.Float64Histogram
	conflicts  metric.Int64Counter
	failures   metric.Int64Counter
	gcRewrites metric.Int64Counter
}

func newMetrics(mp metric.MeterProvider) (*metrics, error) {
	m := mp.Meter(meterName)
	var (
		out metrics
		err error
	)
	must := func(e error) {
		if err == nil {
			err = e
		}
	}
	out.rounds, err = m.Int64Counter("hostd.catalog.commit.rounds", metric.WithDescription("Commit rounds run by the batching committer."))
	var e error
	out.txns, e = m.Int64Counter("hostd.catalog.commit.txns", metric.WithDescription("Badger transactions committed (one per round unless a round is split)."))
	must(e)
	out.writers, e = m.Int64Histogram("hostd.catalog.commit.writers", metric.WithDescription("Writers (batches) per commit round."),
		metric.WithExplicitBucketBoundaries(1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024))
	must(e)
	out.latency, e = m.Float64Histogram("hostd.catalog.commit.duration", metric.WithUnit("s"), metric.WithDescription("Duration of one commit round, validation to fsync."),
		metric.WithExplicitBucketBoundaries(0.0001, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1))
	must(e)
	out.conflicts, e = m.Int64Counter("hostd.catalog.commit.conflicts", metric.WithDescription("Batches rejected because an optimistic check failed."))
	must(e)
	out.failures, e = m.Int64Counter("hostd.catalog.commit.failures", metric.WithDescription("Commit rounds (or parts) that failed with a storage error."))
	must(e)
	out.gcRewrites, e = m.Int64Counter("hostd.catalog.gc.rewrites", metric.WithDescription("Value-log files rewritten by GC."))
	must(e)
	if err != nil {
		return nil, err
	}
	return &out, nil
}

// backendAttr tells these instruments from the etcd catalog's, which have
// the same names (runtime/catalog/etcdcat).
var backendAttr = metric.WithAttributes(attribute.String("backend", "badger"))

func (m *metrics) round(d time.Duration, writers, txns int, conflicts int64, failed bool) {
	ctx := context.Background()
	m.rounds.Add(ctx, 1, backendAttr)
	m.txns.Add(ctx, int64(txns), backendAttr)
	m.writers.Record(ctx, int64(writers), backendAttr)
	m.latency.Record(ctx, d.Seconds(), metric.WithAttributes(attribute.String("backend", "badger"), attribute.Bool("failed", failed)))
	if conflicts > 0 {
		m.conflicts.Add(ctx, conflicts, backendAttr)
	}
	if failed {
		m.failures.Add(ctx, 1, backendAttr)
	}
}

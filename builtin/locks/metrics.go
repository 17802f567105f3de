package locks

import (
	"context"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/noop"
)

// leaseMetrics are the lease service's instruments:
//
//	hostd.locks.ops        counter   {op, result}: every operation and its result code
//	hostd.locks.op.duration histogram {op} seconds
//	hostd.locks.ended      counter   {why}: grants ended (released, expired, evicted)
//	hostd.locks.grants     gauge     live grants
//	hostd.locks.waiters    gauge     queued acquires
type leaseMetrics struct {
	ops   metric.Int64Counter
	dur   metric.Float64Histogram
	ended metric.Int64Counter
}

func newLeaseMetrics(mp metric.MeterProvider, s *Service) *leaseMetrics {
	if mp == nil {
		mp = noop.NewMeterProvider()
	}
	m := mp.Meter("github.com/hostd-dev/hostd/builtin/locks")
	lm := &leaseMetrics{}
	// Creation errors only come from a misconfigured SDK; the returned
	// instruments are then no-ops.
	lm.ops, _ = m.Int64Counter("hostd.locks.ops", metric.WithDescription("lease-lock operations by result code"))
	lm.dur, _ = m.Float64Histogram("hostd.locks.op.duration", metric.WithUnit("s"), metric.WithDescription("lease-lock operation latency"))
	lm.ended, _ = m.Int64Counter("hostd.locks.ended", metric.WithDescription("grants ended, by why"))
	_, _ = m.Int64ObservableGauge("hostd.locks.grants", metric.WithDescription("grants held"),
		metric.WithInt64Callback(func(_ context.Context, o metric.Int64Observer) error {
			o.Observe(int64(s.Stats().Grants))
			return nil
		}))
	_, _ = m.Int64ObservableGauge("hostd.locks.waiters", metric.WithDescription("queued acquires"),
		metric.WithInt64Callback(func(_ context.Context, o metric.Int64Observer) error {
			o.Observe(int64(s.Stats().Waiters))
			return nil
		}))
	return lm
}

func (m *leaseMetrics) op(ctx context.Context, op, code string, d time.Duration) {
	m.ops.Add(ctx, 1, metric.WithAttributes(attribute.String("op", op), attribute.String("result", code)))
	m.dur.Record(ctx, d.Seconds(), metric.WithAttributes(attribute.String("op", op)))
}

func (m *leaseMetrics) expired(why string, n int) {
	m.ended.Add(context.Background(), int64(n), metric.WithAttributes(attribute.String("why", why)))
}

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

	// Options with attribute sets built once (read-only after
	// newLeaseMetrics): a measurement builds no attribute set and, passed
	// as an existing slice, allocates no variadic slice either.
	opSets  map[string]map[string][]metric.AddOption // op -> result -> {op, result}
	durSets map[string][]metric.RecordOption         // op -> {op}
}

// leaseOps and resultCodes are the attribute values the service records
// (ErrorCode's codes plus "ok").
var (
	leaseOps    = []string{"acquire", "renew", "release", "check_fence", "list", "get", "inspect", "force_release", "audit"}
	resultCodes = []string{"ok", "locked", "not_holder", "expired", "ttl_too_long", "invalid_key", "canceled", "invalid_argument", "not_found", "unavailable", "internal"}
)

func newLeaseMetrics(mp metric.MeterProvider, s *Service) *leaseMetrics {
	if mp == nil {
		mp = noop.NewMeterProvider()
	}
	m := mp.Meter("github.com/hostd-dev/hostd/builtin/locks")
	lm := &leaseMetrics{opSets: map[string]map[string][]metric.AddOption{}, durSets: map[string][]metric.RecordOption{}}
	for _, op := range leaseOps {
		lm.durSets[op] = []metric.RecordOption{metric.WithAttributeSet(attribute.NewSet(attribute.String("op", op)))}
		lm.opSets[op] = map[string][]metric.AddOption{}
		for _, code := range resultCodes {
			lm.opSets[op][code] = []metric.AddOption{metric.WithAttributeSet(attribute.NewSet(attribute.String("op", op), attribute.String("result", code)))}
		}
	}
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
	opSet, ok := m.opSets[op][code]
	if !ok {
		opSet = []metric.AddOption{metric.WithAttributes(attribute.String("op", op), attribute.String("result", code))}
	}
	durSet, ok := m.durSets[op]
	if !ok {
		durSet = []metric.RecordOption{metric.WithAttributes(attribute.String("op", op))}
	}
	m.ops.Add(ctx, 1, opSet...)
	m.dur.Record(ctx, d.Seconds(), durSet...)
}

// endedSets are the options of hostd.locks.ended by why (read-only).
var endedSets = func() map[string][]metric.AddOption {
	m := map[string][]metric.AddOption{}
	for _, why := range []string{"released", "expired", "evicted"} {
		m[why] = []metric.AddOption{metric.WithAttributeSet(attribute.NewSet(attribute.String("why", why)))}
	}
	return m
}()

func (m *leaseMetrics) expired(why string, n int) {
	opts, ok := endedSets[why]
	if !ok {
		opts = []metric.AddOption{metric.WithAttributes(attribute.String("why", why))}
	}
	m.ended.Add(context.Background(), int64(n), opts...)
}

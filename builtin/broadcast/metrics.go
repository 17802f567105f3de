package broadcast

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

type metrics struct {
	appendAttempts      metric.Int64Counter
	appendFailures      metric.Int64Counter
	callbackAttempts    metric.Int64Counter
	callbackFailures    metric.Int64Counter
	callbackConflicts   metric.Int64Counter
	callbackInterrupted metric.Int64Counter
	finished            metric.Int64Counter
	tooLarge            metric.Int64Counter
	dropped             metric.Int64Counter
	idemConflicts       metric.Int64Counter
	latency             metric.Float64Histogram
	appendDuration      metric.Float64Histogram
	callbackDuration    metric.Float64Histogram
}

// stateOpts holds one prebuilt attribute option per state: building an
// attribute set per call allocates and sorts on every finished task.
var stateOpts = func() map[State]metric.MeasurementOption {
	m := map[State]metric.MeasurementOption{}
	for _, s := range []State{StatePending, StateTombstone, StateFailed} {
		m[s] = metric.WithAttributeSet(attribute.NewSet(attribute.String("state", string(s))))
	}
	return m
}()

func metricState(s State) metric.AddOption {
	if o, ok := stateOpts[s]; ok {
		return o
	}
	return metric.WithAttributes(attribute.String("state", string(s)))
}

func newMetrics(mp metric.MeterProvider, e *Engine) (*metrics, error) {
	m := mp.Meter("github.com/hostd-dev/hostd/builtin/broadcast")
	var x metrics
	var err error
	c := func(name, desc string) metric.Int64Counter {
		if err != nil {
			return nil
		}
		var ctr metric.Int64Counter
		ctr, err = m.Int64Counter(name, metric.WithDescription(desc))
		return ctr
	}
	x.appendAttempts = c("hostd.broadcast.append.attempts", "Append attempts (one per vchannel per try).")
	x.appendFailures = c("hostd.broadcast.append.failures", "Failed append attempts.")
	x.callbackAttempts = c("hostd.broadcast.callback.attempts", "Ack-callback runs, conflict re-runs included.")
	x.callbackFailures = c("hostd.broadcast.callback.failures", "Ack-callback attempts that returned an error.")
	x.callbackConflicts = c("hostd.broadcast.callback.conflicts", "Ack-callback re-runs after a plugin KV conflict.")
	x.tooLarge = c("hostd.broadcast.too_large", "Broadcasts refused before any lock or ID because their task record or message can never be stored.")
	x.dropped = c("hostd.broadcast.dropped", "Tasks dropped because their PENDING record failed to commit for good (never answered with an ID).")
	x.callbackInterrupted = c("hostd.broadcast.callback.interrupted", "Ack-callback runs interrupted by an abandon or a shutdown, by reason.")
	x.idemConflicts = c("hostd.broadcast.idempotency.conflicts", "Requests refused because their idempotency key belongs to a different request (409).")
	x.finished = c("hostd.broadcast.finished", "Tasks that reached TOMBSTONE or FAILED, by state.")
	if err != nil {
		return nil, err
	}
	x.latency, err = m.Float64Histogram("hostd.broadcast.latency", metric.WithUnit("s"),
		metric.WithDescription("Time from persist to TOMBSTONE."),
		metric.WithExplicitBucketBoundaries(.0005, .001, .002, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30))
	if err != nil {
		return nil, err
	}
	buckets := metric.WithExplicitBucketBoundaries(.0001, .0005, .001, .002, .005, .01, .025, .05, .1, .25, .5, 1, 5)
	if x.appendDuration, err = m.Float64Histogram("hostd.broadcast.append.duration", metric.WithUnit("s"), buckets,
		metric.WithDescription("Duration of one append round (all queued vchannel appends of all tasks).")); err != nil {
		return nil, err
	}
	if x.callbackDuration, err = m.Float64Histogram("hostd.broadcast.callback.duration", metric.WithUnit("s"), buckets,
		metric.WithDescription("Duration of one ack-callback run (handler only).")); err != nil {
		return nil, err
	}
	_, err = m.Int64ObservableGauge("hostd.broadcast.lock.waiters", metric.WithDescription("Broadcasts (and admin retries) waiting for resource keys."),
		metric.WithInt64Callback(func(_ context.Context, o metric.Int64Observer) error {
			e.mu.Lock()
			n := len(e.lockWaits)
			e.mu.Unlock()
			o.Observe(int64(n))
			return nil
		}))
	if err != nil {
		return nil, err
	}
	_, err = m.Int64ObservableGauge("hostd.broadcast.tasks", metric.WithDescription("Tasks in the catalog by state."),
		metric.WithInt64Callback(func(_ context.Context, o metric.Int64Observer) error {
			e.mu.Lock()
			counts := map[State]int{StatePending: e.byState[StatePending], StateTombstone: e.byState[StateTombstone], StateFailed: e.byState[StateFailed]}
			e.mu.Unlock()
			for s, n := range counts {
				o.Observe(int64(n), metric.WithAttributes(attribute.String("state", string(s))))
			}
			return nil
		}))
	if err != nil {
		return nil, err
	}
	return &x, nil
}

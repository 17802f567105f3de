package cluster

import (
	"context"
	"sync/atomic"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// metrics of a replica (all prefixed hostd.cluster.).
type metrics struct {
	leaderChanges metric.Int64Counter
	forwarded     metric.Int64Counter
	fenced        metric.Int64Counter
	memberCalls   metric.Int64Counter
	leading       atomic.Bool
}

func newMetrics(n *Node) *metrics {
	mt := n.tel.MeterProvider.Meter("github.com/hostd-dev/hostd/host/cluster")
	m := &metrics{}
	m.leaderChanges, _ = mt.Int64Counter("hostd.cluster.leader_changes",
		metric.WithDescription("leader terms this replica has observed begin"))
	m.forwarded, _ = mt.Int64Counter("hostd.cluster.forwarded_requests",
		metric.WithDescription("requests this replica did not serve itself, by outcome: ok, error (leader unreachable), not_leader (a forwarded request reached a non-leader), no_leader (none within the request timeout)"))
	m.fenced, _ = mt.Int64Counter("hostd.cluster.fenced_commits",
		metric.WithDescription("commits (and JetStream appends) refused because this replica's leader term had ended"))
	m.memberCalls, _ = mt.Int64Counter("hostd.cluster.member_calls",
		metric.WithDescription("calls to members for requests that reach every replica (traces_list, traces_get, plugin_reload), by op and outcome: ok, error, unreachable"))
	_, _ = mt.Int64ObservableGauge("hostd.cluster.term",
		metric.WithDescription("the current leader's term (election key create revision); 0 during an election"),
		metric.WithInt64Callback(func(_ context.Context, o metric.Int64Observer) error {
			n.mu.Lock()
			defer n.mu.Unlock()
			if n.leader != nil {
				o.Observe(n.leader.term)
			} else {
				o.Observe(0)
			}
			return nil
		}))
	_, _ = mt.Int64ObservableGauge("hostd.cluster.leader",
		metric.WithDescription("1 while this replica leads, else 0"),
		metric.WithInt64Callback(func(_ context.Context, o metric.Int64Observer) error {
			v := int64(0)
			if m.leading.Load() {
				v = 1
			}
			o.Observe(v)
			return nil
		}))
	return m
}

func opOutcome(op, o string) metric.AddOption {
	return metric.WithAttributes(attribute.String("op", op), attribute.String("outcome", o))
}

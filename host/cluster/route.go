package cluster

import (
	"context"
	"net/http"
	"net/http/httputil"
	"net/url"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/hostd-dev/hostd/host/api"
)

// route serves every request the front server has no route of its own
// for: locally when this replica leads, else forwarded once to the leader;
// with no leader it waits up to api.request_timeout for one.
func (n *Node) route(w http.ResponseWriter, r *http.Request) {
	wait := time.NewTimer(n.cfg.API.RequestTimeout)
	defer wait.Stop()
	waited := time.Now()
	for {
		n.mu.Lock()
		var local http.Handler
		if n.term != nil && n.term.host != nil {
			local = n.term.host
		}
		li := n.leader
		changed := n.changed
		n.mu.Unlock()
		switch {
		case local != nil:
			local.ServeHTTP(w, r)
			return
		case r.Header.Get(HopHeader) != "":
			// Forward once: the sender thought this replica leads; it
			// does not (any more). The client retries.
			n.m.forwarded.Add(r.Context(), 1, outcome("not_leader"))
			api.WriteError(w, api.Unavailable("request forwarded by %s, but %s is not the leader (any more); retry",
				r.Header.Get(HopHeader), n.name).With("reason", "not_leader"))
			return
		case li != nil && li.Name != n.name:
			n.forward(w, r, li)
			return
		}
		// No leader, or this replica's term is still starting.
		select {
		case <-changed:
		case <-r.Context().Done():
			return
		case <-wait.C:
			api.WriteError(w, api.Unavailable("no leader for %s (an election or a new leader's recovery is in progress); retry",
				time.Since(waited).Round(time.Millisecond)).With("reason", "no_leader"))
			n.m.forwarded.Add(context.WithoutCancel(r.Context()), 1, outcome("no_leader"))
			return
		}
	}
}

func outcome(o string) metric.AddOption {
	return metric.WithAttributes(attribute.String("outcome", o))
}

// forward proxies r to the leader with the caller's headers (token,
// traceparent, idempotency key) and the hop header.
func (n *Node) forward(w http.ResponseWriter, r *http.Request, li *leaderInfo) {
	target, err := url.Parse(li.Address)
	if err != nil || target.Host == "" {
		api.WriteError(w, api.Unavailable("the leader %s advertises an unusable address %q; retry", li.Name, li.Address).
			With("reason", "leader_unreachable"))
		return
	}
	failed := false
	// A CLIENT span on this replica, so that the trace of a request
	// served through a follower shows the hop (GET /v1/traces/{id}
	// merges the replicas' spans).
	prop := propagation.TraceContext{}
	ctx, span := n.tel.TracerProvider.Tracer("github.com/hostd-dev/hostd/host/cluster").Start(
		prop.Extract(r.Context(), propagation.HeaderCarrier(r.Header)), "forward to leader",
		trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(
			attribute.String("http.request.method", r.Method), attribute.String("url.path", r.URL.Path),
			attribute.String("hostd.cluster.leader", li.Name)))
	defer span.End()
	r = r.WithContext(ctx)
	p := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(target)
			pr.Out.Host = pr.In.Host
			pr.Out.Header.Set(HopHeader, n.name)
			pr.Out.Header.Del("Tracestate")
			prop.Inject(pr.Out.Context(), propagation.HeaderCarrier(pr.Out.Header))
		},
		Transport:     n.transport,
		FlushInterval: -1, // long polls and backup streams pass through at once
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			failed = true
			n.log.Warn("forward to leader failed", "leader", li.Name, "address", li.Address, "err", err)
			api.WriteError(w, api.Unavailable("the leader %s (%s) did not answer: %v; retry", li.Name, li.Address, err).
				With("reason", "leader_unreachable"))
		},
	}
	p.ServeHTTP(w, r)
	o := "ok"
	if failed {
		o = "error"
		span.SetStatus(codes.Error, "leader unreachable")
	}
	n.m.forwarded.Add(context.WithoutCancel(r.Context()), 1, outcome(o))
}

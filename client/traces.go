package client

import (
	"context"
	"net/http"
	"net/url"

	"github.com/hostd-dev/hostd/wire"
)

// Trace types (GET /v1/traces, GET /v1/traces/{id}).
type (
	TraceSummary = wire.TraceSummary
	TracePage    = wire.TracePage
	Trace        = wire.Trace
	TraceMember  = wire.TraceMember
)

// TraceFilter narrows ListTraces; the zero value lists every trace.
type TraceFilter struct {
	Broadcast string // only traces with a span of this broadcast id
	Root      string // only traces whose root span name contains this
	Errors    bool   // only traces with an error span
}

// ListTraces lists the recorded traces, most recently started first. In
// cluster mode every replica's traces are merged; Missing names the
// replicas that did not answer (their traces are absent, not an error).
func (c *Client) ListTraces(ctx context.Context, f TraceFilter, p Page) (*TracePage, error) {
	q := url.Values{}
	if f.Broadcast != "" {
		q.Set("broadcast", f.Broadcast)
	}
	if f.Root != "" {
		q.Set("root", f.Root)
	}
	if f.Errors {
		q.Set("errors", "true")
	}
	path := "/v1/traces"
	if len(q) > 0 {
		path += "?" + q.Encode()
	}
	var out TracePage
	if err := c.Do(ctx, http.MethodGet, p.Query(path), nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// GetTrace returns the spans of a trace (by its 32-hex-digit trace id) or
// of every trace of a broadcast (by its broadcast id) as OTLP-JSON, merged
// from every replica in cluster mode (Missing names those that did not
// answer). IsNotFound if no span is stored.
func (c *Client) GetTrace(ctx context.Context, id string) (*Trace, error) {
	var out Trace
	if err := c.Do(ctx, http.MethodGet, "/v1/traces/"+url.PathEscape(id), nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

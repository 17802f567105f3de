package tracestore

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"go.opentelemetry.io/collector/pdata/ptrace"
	"go.opentelemetry.io/collector/pdata/ptrace/ptraceotlp"

	"github.com/hostd-dev/hostd/host/config"
)

// ErrPush is returned (wrapped) when a collector refuses spans.
var ErrPush = errors.New("tracestore: push failed")

// PushConfig says where and how to post spans.
type PushConfig struct {
	// Endpoint is the collector's base URL (http://host:4318) or the full
	// /v1/traces URL. Required.
	Endpoint string
	// Headers are added to every request (e.g. an auth token).
	Headers map[string]string
	// BatchSize is the number of spans per request; default 512.
	BatchSize int
	// Timeout bounds each request; default 10s.
	Timeout time.Duration
	// Retries is how many times a request refused with 429/502/503/504 or a
	// transport error is retried, with a doubling pause from 200ms;
	// default 3, negative means none.
	Retries int
	// Client is the HTTP client; default a new http.Client.
	Client *http.Client
}

// PushResult counts what a push sent.
type PushResult struct {
	Requests int
	Spans    int
	Rejected int64 // spans the collector reported as rejected (partial success)
}

// TracesURL returns the /v1/traces URL for an endpoint: a URL with no path
// (or "/") gets /v1/traces appended; a URL with a path is used as is. It
// parses with config.ParseOTLPEndpoint, as the OTLP exporters do; push
// needs a URL (the scheme says whether TLS is used).
func TracesURL(endpoint string) (string, error) {
	e, err := config.ParseOTLPEndpoint(endpoint)
	if err != nil {
		return "", fmt.Errorf("%w: %v", ErrPush, err)
	}
	if e.Scheme == "" {
		return "", fmt.Errorf("%w: endpoint %q must be an http:// or https:// URL", ErrPush, endpoint)
	}
	return e.URL(false), nil
}

// Push posts the spans of td to an OTLP/HTTP collector as binary protobuf,
// BatchSize spans per request, and stops at the first refused request.
func Push(ctx context.Context, cfg PushConfig, td ptrace.Traces) (PushResult, error) {
	var res PushResult
	target, err := TracesURL(cfg.Endpoint)
	if err != nil {
		return res, err
	}
	if cfg.BatchSize <= 0 {
		cfg.BatchSize = 512
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = 10 * time.Second
	}
	if cfg.Retries == 0 {
		cfg.Retries = 3
	}
	if cfg.Client == nil {
		cfg.Client = &http.Client{}
	}
	for _, batch := range splitTraces(td, cfg.BatchSize) {
		body, err := ptraceotlp.NewExportRequestFromTraces(batch).MarshalProto()
		if err != nil {
			return res, fmt.Errorf("%w: encode: %v", ErrPush, err)
		}
		rejected, err := postWithRetry(ctx, cfg, target, body)
		if err != nil {
			return res, err
		}
		res.Requests++
		res.Spans += batch.SpanCount()
		res.Rejected += rejected
	}
	return res, nil
}

func postWithRetry(ctx context.Context, cfg PushConfig, target string, body []byte) (int64, error) {
	pause := 200 * time.Millisecond
	for attempt := 0; ; attempt++ {
		rejected, retry, err := post(ctx, cfg, target, body)
		if err == nil || !retry || attempt >= cfg.Retries {
			return rejected, err
		}
		select {
		case <-ctx.Done():
			return 0, fmt.Errorf("%w: %v (last error: %v)", ErrPush, ctx.Err(), err)
		case <-time.After(pause):
		}
		pause *= 2
	}
}

func post(ctx context.Context, cfg PushConfig, target string, body []byte) (rejected int64, retry bool, err error) {
	rctx, cancel := context.WithTimeout(ctx, cfg.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(rctx, http.MethodPost, target, bytes.NewReader(body))
	if err != nil {
		return 0, false, fmt.Errorf("%w: %v", ErrPush, err)
	}
	req.Header.Set("Content-Type", "application/x-protobuf")
	for k, v := range cfg.Headers {
		req.Header.Set(k, v)
	}
	resp, err := cfg.Client.Do(req)
	if err != nil {
		return 0, ctx.Err() == nil, fmt.Errorf("%w: %v", ErrPush, err)
	}
	defer resp.Body.Close()
	rb, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if resp.StatusCode/100 != 2 {
		switch resp.StatusCode {
		case http.StatusTooManyRequests, http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout:
			retry = true
		}
		msg := strings.TrimSpace(string(rb))
		if len(msg) > 300 {
			msg = msg[:300] + "…"
		}
		return 0, retry, fmt.Errorf("%w: %s answered %s: %s", ErrPush, target, resp.Status, msg)
	}
	if len(rb) > 0 && strings.Contains(resp.Header.Get("Content-Type"), "protobuf") {
		er := ptraceotlp.NewExportResponse()
		if er.UnmarshalProto(rb) == nil {
			rejected = er.PartialSuccess().RejectedSpans()
		}
	}
	return rejected, false, nil
}

// splitTraces cuts td into pieces of at most n spans, keeping each span with
// its resource and scope.
func splitTraces(td ptrace.Traces, n int) []ptrace.Traces {
	var out []ptrace.Traces
	cur, count := ptrace.NewTraces(), 0
	rss := td.ResourceSpans()
	for i := 0; i < rss.Len(); i++ {
		rs := rss.At(i)
		var curRS ptrace.ResourceSpans
		haveRS := false
		for j := 0; j < rs.ScopeSpans().Len(); j++ {
			ss := rs.ScopeSpans().At(j)
			var curSS ptrace.ScopeSpans
			haveSS := false
			for k := 0; k < ss.Spans().Len(); k++ {
				if count == n {
					out = append(out, cur)
					cur, count, haveRS, haveSS = ptrace.NewTraces(), 0, false, false
				}
				if !haveRS {
					curRS = cur.ResourceSpans().AppendEmpty()
					rs.Resource().CopyTo(curRS.Resource())
					curRS.SetSchemaUrl(rs.SchemaUrl())
					haveRS = true
				}
				if !haveSS {
					curSS = curRS.ScopeSpans().AppendEmpty()
					ss.Scope().CopyTo(curSS.Scope())
					curSS.SetSchemaUrl(ss.SchemaUrl())
					haveSS = true
				}
				ss.Spans().At(k).CopyTo(curSS.Spans().AppendEmpty())
				count++
			}
		}
	}
	if count > 0 {
		out = append(out, cur)
	}
	return out
}

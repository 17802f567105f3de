package telemetry

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http/httptest"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/trace"

	"github.com/hostd-dev/hostd/host/config"
)

func newProviders(t *testing.T, mutate func(*config.Telemetry)) *Providers {
	t.Helper()
	cfg := config.Default().Telemetry
	cfg.Traces.Exporter = "none"
	if mutate != nil {
		mutate(&cfg)
	}
	p, err := New(context.Background(), cfg, Options{ServiceVersion: "v9.9.9"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := p.Shutdown(context.Background()); err != nil {
			t.Error(err)
		}
	})
	return p
}

func TestPrometheusEndpoint(t *testing.T) {
	p := newProviders(t, nil)
	c, err := p.MeterProvider.Meter("test").Int64Counter("hostd.test.things")
	if err != nil {
		t.Fatal(err)
	}
	c.Add(context.Background(), 3)
	rec := httptest.NewRecorder()
	p.Metrics.ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	body := rec.Body.String()
	for _, want := range []string{"hostd_test_things_total", " 3", "go_goroutines", `service_name="hostd"`, "service_instance_id=\"" + p.InstanceID} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
}

func TestInstanceIDPerStart(t *testing.T) {
	a, b := newProviders(t, nil), newProviders(t, nil)
	if a.InstanceID == "" || a.InstanceID == b.InstanceID {
		t.Fatalf("instance ids %q %q", a.InstanceID, b.InstanceID)
	}
	if v, ok := a.Resource.Set().Value("service.version"); !ok || v.AsString() != "v9.9.9" {
		t.Fatalf("service.version: %v", v)
	}
}

func TestSamplerParentBased(t *testing.T) {
	p := newProviders(t, func(c *config.Telemetry) { c.Traces.Sampler = "always_off" })
	tr := p.TracerProvider.Tracer("test")
	_, root := tr.Start(context.Background(), "root")
	if root.SpanContext().IsSampled() {
		t.Fatal("always_off sampled a root")
	}
	root.End()
	sampledParent := trace.NewSpanContext(trace.SpanContextConfig{
		TraceID: trace.TraceID{1}, SpanID: trace.SpanID{2}, TraceFlags: trace.FlagsSampled, Remote: true,
	})
	_, child := tr.Start(trace.ContextWithRemoteSpanContext(context.Background(), sampledParent), "child")
	if !child.SpanContext().IsSampled() {
		t.Fatal("a child of a sampled parent must stay sampled")
	}
	child.End()

	on := newProviders(t, nil).TracerProvider.Tracer("test")
	unsampled := trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{3}, SpanID: trace.SpanID{4}, Remote: true})
	_, c2 := on.Start(trace.ContextWithRemoteSpanContext(context.Background(), unsampled), "child")
	if c2.SpanContext().IsSampled() {
		t.Fatal("a child of an unsampled parent must stay unsampled")
	}
	c2.End()
}

func TestUnknownExporter(t *testing.T) {
	cfg := config.Default().Telemetry
	cfg.Traces.Exporter = "carrier-pigeon"
	if _, err := New(context.Background(), cfg, Options{}); err == nil || !strings.Contains(err.Error(), "carrier-pigeon") {
		t.Fatalf("got %v", err)
	}
}

func TestOTLPExportersBuild(t *testing.T) {
	for _, exp := range []string{"otlp-grpc", "otlp-http"} {
		p := newProviders(t, func(c *config.Telemetry) {
			c.Traces.Exporter = exp
			c.Traces.Endpoint = "127.0.0.1:1" // nothing listens; export fails quietly
			c.Traces.Insecure = true
			c.Traces.Headers = map[string]string{"x-key": "v"}
		})
		if _, ok := p.TracerProvider.(interface{ ForceFlush(context.Context) error }); !ok {
			t.Fatalf("%s: not an SDK provider", exp)
		}
	}
	for _, name := range config.TraceExporters {
		if _, ok := traceExporters[name]; !ok {
			t.Errorf("config accepts exporter %q but telemetry has no constructor", name)
		}
	}
}

func TestNewLogger(t *testing.T) {
	var buf bytes.Buffer
	l, err := NewLogger(config.Log{Level: "warn", Format: "json"}, &buf)
	if err != nil {
		t.Fatal(err)
	}
	l.Info("hidden")
	l.Warn("shown", "k", 1)
	var rec map[string]any
	if err := json.Unmarshal(buf.Bytes(), &rec); err != nil || rec["msg"] != "shown" || rec["k"] != float64(1) {
		t.Fatalf("json log: %q %v", buf.String(), err)
	}
	if _, err := NewLogger(config.Log{Level: "loud", Format: "text"}, io.Discard); err == nil {
		t.Fatal("bad level accepted")
	}
}

func TestDeferTraces(t *testing.T) {
	cfg := config.Default().Telemetry
	cfg.Traces.Exporter = "none"
	p, err := New(context.Background(), cfg, Options{DeferTraces: true})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Shutdown(context.Background())
	_, sp := p.TracerProvider.Tracer("t").Start(context.Background(), "before")
	if sp.SpanContext().IsValid() {
		t.Fatal("a span before StartTraces must be a no-op")
	}
	sp.End()
	if err := p.StartTraces(context.Background()); err != nil {
		t.Fatal(err)
	}
	_, sp = p.TracerProvider.Tracer("t").Start(context.Background(), "after")
	if !sp.SpanContext().IsSampled() {
		t.Fatal("StartTraces did not install the SDK provider")
	}
	sp.End()
	if err := p.StartTraces(context.Background()); err == nil {
		t.Fatal("second StartTraces accepted")
	}
}

package telemetry

import (
	"bytes"
	"context"
	"io"
	"log"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	collectortrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	"github.com/hostd-dev/hostd/host/config"
)

// receiver is a tiny OTLP collector: it records the names of the spans it
// was sent and the paths that were posted to.
type receiver struct {
	collectortrace.UnimplementedTraceServiceServer
	mu    sync.Mutex
	spans []string
	paths []string
}

func (rc *receiver) add(req *collectortrace.ExportTraceServiceRequest) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	for _, rs := range req.ResourceSpans {
		for _, ss := range rs.ScopeSpans {
			for _, s := range ss.Spans {
				rc.spans = append(rc.spans, s.Name)
			}
		}
	}
}

func (rc *receiver) got() ([]string, []string) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return slices.Clone(rc.spans), slices.Clone(rc.paths)
}

// Export is the OTLP/gRPC service.
func (rc *receiver) Export(_ context.Context, req *collectortrace.ExportTraceServiceRequest) (*collectortrace.ExportTraceServiceResponse, error) {
	rc.add(req)
	return &collectortrace.ExportTraceServiceResponse{}, nil
}

// ServeHTTP is OTLP/HTTP (binary protobuf) on the given paths; 404
// elsewhere, as a real collector answers.
func (rc *receiver) handler(paths ...string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rc.mu.Lock()
		rc.paths = append(rc.paths, r.URL.Path)
		rc.mu.Unlock()
		if r.Method != http.MethodPost || !slices.Contains(paths, r.URL.Path) {
			http.NotFound(w, r)
			return
		}
		body, err := io.ReadAll(r.Body)
		var req collectortrace.ExportTraceServiceRequest
		if err == nil {
			err = proto.Unmarshal(body, &req)
		}
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		rc.add(&req)
		out, _ := proto.Marshal(&collectortrace.ExportTraceServiceResponse{})
		w.Header().Set("Content-Type", "application/x-protobuf")
		_, _ = w.Write(out)
	})
}

// exportOne starts hostd's telemetry with the exporter, ends one span and
// shuts down (which flushes the batch).
func exportOne(t *testing.T, exporter, endpoint string, insecure bool, name string, logger *slog.Logger) {
	t.Helper()
	full := config.Default()
	cfg := &full.Telemetry
	cfg.Traces.Exporter, cfg.Traces.Endpoint, cfg.Traces.Insecure = exporter, endpoint, insecure
	cfg.Traces.Timeout = time.Minute // a loaded machine is slow, never a reason to fail
	cfg.Metrics.Prometheus = false
	if err := full.Validate(); err != nil {
		t.Fatalf("check-config refuses %s %q: %v", exporter, endpoint, err)
	}
	p, err := New(context.Background(), *cfg, Options{Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	_, span := p.TracerProvider.Tracer("test").Start(context.Background(), name)
	span.End()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	_ = p.Shutdown(ctx) // export errors are checked through the receiver and the log
}

// telemetry.traces.endpoint written as users write it — a URL without a
// path, a URL with a path, host:port — reaches a real OTLP/HTTP receiver
// at the right path (no path: /v1/traces, as `hostd trace push`).
func TestOTLPHTTPExporterEndpoints(t *testing.T) {
	rc := &receiver{}
	srv := httptest.NewServer(rc.handler("/v1/traces", "/custom/v1/traces"))
	defer srv.Close()
	hostPort := strings.TrimPrefix(srv.URL, "http://")
	cases := []struct {
		name, endpoint string
		insecure       bool
	}{
		{"url", srv.URL, false},
		{"url-slash", srv.URL + "/", false},
		{"url-path", srv.URL + "/custom/v1/traces", false},
		{"hostport", hostPort, true},
	}
	for _, c := range cases {
		exportOne(t, "otlp-http", c.endpoint, c.insecure, "span-"+c.name, nil)
	}
	spans, paths := rc.got()
	for _, c := range cases {
		if !slices.Contains(spans, "span-"+c.name) {
			t.Errorf("%s (%q): span not received; got spans %v at paths %v", c.name, c.endpoint, spans, paths)
		}
	}
	for _, p := range paths {
		if p != "/v1/traces" && p != "/custom/v1/traces" {
			t.Errorf("the exporter posted to %s", p)
		}
	}
}

// The same for OTLP/gRPC: a URL (http:// = plain text) and host:port with
// insecure.
func TestOTLPGRPCExporterEndpoints(t *testing.T) {
	rc := &receiver{}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer()
	collectortrace.RegisterTraceServiceServer(gs, rc)
	go func() { _ = gs.Serve(ln) }()
	defer gs.Stop()
	addr := ln.Addr().String()
	exportOne(t, "otlp-grpc", "http://"+addr, false, "grpc-url", nil)
	exportOne(t, "otlp-grpc", addr, true, "grpc-hostport", nil)
	spans, _ := rc.got()
	for _, want := range []string{"grpc-url", "grpc-hostport"} {
		if !slices.Contains(spans, want) {
			t.Errorf("span %s not received; got %v", want, spans)
		}
	}
}

// A failed export is reported in hostd's structured log, not through Go's
// log package (the OTel SDK's default).
func TestOTLPExportErrorsGoToSlog(t *testing.T) {
	rc := &receiver{}
	srv := httptest.NewServer(rc.handler()) // 404 on every path
	defer srv.Close()
	var goLog bytes.Buffer
	orig := log.Writer()
	log.SetOutput(&goLog)
	defer log.SetOutput(orig)
	var mu sync.Mutex
	var slogBuf bytes.Buffer
	logger := slog.New(slog.NewTextHandler(writerFunc(func(b []byte) (int, error) {
		mu.Lock()
		defer mu.Unlock()
		return slogBuf.Write(b)
	}), nil))
	exportOne(t, "otlp-http", srv.URL, false, "lost", logger)
	mu.Lock()
	got := slogBuf.String()
	mu.Unlock()
	if !strings.Contains(got, "level=ERROR") || !strings.Contains(got, "opentelemetry") || !strings.Contains(got, "404") {
		t.Errorf("hostd's log lacks the export error:\n%s", got)
	}
	if goLog.Len() > 0 {
		t.Errorf("Go's log got: %s", goLog.String())
	}
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(b []byte) (int, error) { return f(b) }

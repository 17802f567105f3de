package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.opentelemetry.io/collector/pdata/ptrace"
	"go.opentelemetry.io/collector/pdata/ptrace/ptraceotlp"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/hostd-dev/hostd/client"
	"github.com/hostd-dev/hostd/host/telemetry"
	"github.com/hostd-dev/hostd/wire"
)

// writeTraceData writes two traces through the real file exporter (a
// broadcast with a failed attempt, and an unrelated span), then appends a
// torn line as a SIGKILL mid-write would. It returns the broadcast's trace id.
func writeTraceData(t *testing.T, data string) string {
	t.Helper()
	exp, err := telemetry.NewFileExporter(telemetry.FileExporterConfig{Dir: telemetry.TraceDir(data)})
	if err != nil {
		t.Fatal(err)
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	tr := tp.Tracer("test")
	ctx, req := tr.Start(context.Background(), "POST /v1/broadcasts", trace.WithSpanKind(trace.SpanKindServer))
	cctx, create := tr.Start(ctx, "create broadcast", trace.WithSpanKind(trace.SpanKindProducer),
		trace.WithAttributes(attribute.String("hostd.broadcast.id", "7")))
	create.End()
	for attempt := 1; attempt <= 2; attempt++ {
		_, s := tr.Start(cctx, "process broadcast", trace.WithSpanKind(trace.SpanKindConsumer),
			trace.WithAttributes(attribute.String("hostd.broadcast.id", "7"), attribute.Int("hostd.attempt", attempt)))
		if attempt == 1 {
			s.SetStatus(codes.Error, "trap")
		}
		s.End()
	}
	req.End()
	_, other := tr.Start(context.Background(), "lock acquire")
	other.End()
	if err := tp.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(filepath.Join(telemetry.TraceDir(data), telemetry.TraceFileName), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = f.WriteString(`{"resourceSpans":[{"scopeSpans":[{"spans":[{"traceId":"01`)
	f.Close()
	return req.SpanContext().TraceID().String()
}

func runCmd(t *testing.T, args ...string) (string, string, int) {
	t.Helper()
	var out, errb bytes.Buffer
	code := run(args, &out, &errb)
	return out.String(), errb.String(), code
}

func TestTraceShowLsOnDataDir(t *testing.T) {
	data := t.TempDir()
	tid := writeTraceData(t, data)

	out, stderr, code := runCmd(t, "trace", "show", "7", "--data-dir", data)
	if code != 0 {
		t.Fatalf("show: code %d, stderr %s", code, stderr)
	}
	for _, want := range []string{"trace " + tid, "broadcast 7", "POST /v1/broadcasts  SERVER", "└─ create broadcast  PRODUCER",
		"process broadcast  CONSUMER  attempt=1  ERROR: trap", "process broadcast  CONSUMER  attempt=2"} {
		if !strings.Contains(out, want) {
			t.Errorf("show output lacks %q:\n%s", want, out)
		}
	}
	if !strings.Contains(stderr, "skipped 1 torn and 0 corrupt line(s)") {
		t.Errorf("no torn-line warning on stderr: %q", stderr)
	}

	out, _, code = runCmd(t, "trace", "show", tid, "--data-dir", data, "--json")
	if code != 0 {
		t.Fatal("show --json failed")
	}
	var u ptrace.JSONUnmarshaler
	td, err := u.UnmarshalTraces([]byte(out))
	if err != nil || td.SpanCount() != 4 {
		t.Fatalf("--json: %v, %d spans", err, td.SpanCount())
	}

	out, _, code = runCmd(t, "trace", "ls", "--data-dir", data, "-o", "json")
	if code != 0 {
		t.Fatal("ls failed")
	}
	var ls struct {
		Items []wire.TraceSummary `json:"items"`
	}
	if err := json.Unmarshal([]byte(out), &ls); err != nil || len(ls.Items) != 2 {
		t.Fatalf("ls json %v: %s", err, out)
	}
	if ls.Items[1].TraceID != tid || ls.Items[1].Errors != 1 || ls.Items[1].BroadcastIDs[0] != "7" || ls.Items[0].Root != "lock acquire" {
		t.Fatalf("ls items %+v", ls.Items)
	}
	out, _, _ = runCmd(t, "trace", "ls", "--data-dir", data, "--errors")
	if !strings.Contains(out, tid) || strings.Contains(out, "lock acquire") || !strings.Contains(out, "yes:1") {
		t.Fatalf("ls --errors:\n%s", out)
	}

	out, _, _ = runCmd(t, "trace", "ls", "--data-dir", data, "--root", "POST /v1/")
	if !strings.Contains(out, tid) || strings.Contains(out, "lock acquire") {
		t.Fatalf("ls --root:\n%s", out)
	}

	_, stderr, code = runCmd(t, "trace", "show", "99", "--data-dir", data)
	if code != exitError || !strings.Contains(stderr, "neither a stored trace id nor a broadcast id") {
		t.Fatalf("unknown id: code %d %q", code, stderr)
	}
	_, stderr, code = runCmd(t, "trace", "ls", "--data-dir", t.TempDir())
	if code != exitError || !strings.Contains(stderr, "no trace directory") {
		t.Fatalf("empty dir: code %d %q", code, stderr)
	}
	// The data directory also comes from the config file.
	cfg := filepath.Join(t.TempDir(), "hostd.yaml")
	if err := os.WriteFile(cfg, []byte("data:\n  dir: "+data+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, stderr, code = runCmd(t, "trace", "show", "7", "-c", cfg); code != 0 {
		t.Fatalf("show -c: %d %s", code, stderr)
	}
}

func TestTracePush(t *testing.T) {
	data := t.TempDir()
	tid := writeTraceData(t, data)
	var spans atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer x" {
			http.Error(w, "no auth", http.StatusUnauthorized)
			return
		}
		body, _ := io.ReadAll(r.Body)
		req := ptraceotlp.NewExportRequest()
		if err := req.UnmarshalProto(body); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		spans.Add(int64(req.Traces().SpanCount()))
	}))
	defer srv.Close()

	out, stderr, code := runCmd(t, "trace", "push", "--endpoint", srv.URL, "-H", "Authorization=Bearer x", "--data-dir", data, tid)
	if code != 0 || spans.Load() != 4 || !strings.Contains(out, "pushed 4 spans in 1 request(s)") {
		t.Fatalf("push: code %d, %q %q, collector got %d", code, out, stderr, spans.Load())
	}
	out, _, code = runCmd(t, "trace", "push", "--endpoint", srv.URL, "-H", "Authorization=Bearer x", "--data-dir", data, "--batch-size", "2")
	if code != 0 || spans.Load() != 9 || !strings.Contains(out, "pushed 5 spans in 3 request(s)") {
		t.Fatalf("push all: %q, collector total %d", out, spans.Load())
	}
	_, stderr, code = runCmd(t, "trace", "push", "--endpoint", srv.URL, "--data-dir", data)
	if code != exitError || !strings.Contains(stderr, "401") {
		t.Fatalf("refused push: %d %q", code, stderr)
	}
	if _, _, code = runCmd(t, "trace", "push", "--data-dir", data); code != exitUsage {
		t.Fatalf("missing endpoint: code %d", code)
	}
	if _, _, code = runCmd(t, "trace", "push", "--endpoint", srv.URL, "-H", "bad", "--data-dir", data); code != exitUsage {
		t.Fatalf("bad header: code %d", code)
	}
}

// `hostd trace show|ls` ask a running daemon's API by default (the
// daemon's own span files, GET /v1/traces/{id} and GET /v1/traces);
// --data-dir still reads the files.
func TestTraceShowLsThroughAPI(t *testing.T) {
	dir := t.TempDir()
	d := startDaemon(t, dir, "--listen", "127.0.0.1:0", "--data-dir", "data")
	c, err := client.New(d.addr)
	if err != nil {
		t.Fatal(err)
	}
	res, err := c.SubmitBroadcast(context.Background(), &client.BroadcastRequest{Type: "noop", PayloadText: "cli"})
	if err != nil {
		t.Fatal(err)
	}
	bid := strconv.FormatUint(res.ID, 10)
	var out, stderr string
	var code int
	deadline := time.Now().Add(30 * time.Second)
	for {
		out, stderr, code = runCmd(t, "--addr", d.addr, "trace", "show", bid, "--compact")
		if code == 0 && strings.Contains(out, "create broadcast  PRODUCER") || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if code != 0 || !strings.Contains(out, "POST /v1/broadcasts  SERVER") || !strings.Contains(out, "broadcast "+bid) {
		t.Fatalf("show via the API: code %d\n%s\n%s", code, out, stderr)
	}
	out, stderr, code = runCmd(t, "--addr", d.addr, "trace", "ls", "--broadcast", bid, "-o", "json")
	var ls struct {
		Items []wire.TraceSummary `json:"items"`
	}
	if err := json.Unmarshal([]byte(out), &ls); code != 0 || err != nil || len(ls.Items) != 1 || ls.Items[0].BroadcastIDs[0] != bid {
		t.Fatalf("ls via the API: code %d %v\n%s\n%s", code, err, out, stderr)
	}
	out, _, code = runCmd(t, "--addr", d.addr, "trace", "ls", "-n", "1")
	if code != 0 || strings.Count(strings.TrimSpace(out), "\n") != 1 {
		t.Fatalf("ls -n 1 via the API: %d\n%s", code, out)
	}
	if _, stderr, code = runCmd(t, "--addr", d.addr, "trace", "show", "424242"); code != exitError || !strings.Contains(stderr, "not_found") && !strings.Contains(stderr, "no such trace") {
		t.Fatalf("unknown id via the API: %d %s", code, stderr)
	}
	// Offline, on the same files.
	if out, stderr, code = runCmd(t, "trace", "show", bid, "--data-dir", filepath.Join(dir, "data")); code != 0 || !strings.Contains(out, "create broadcast") {
		t.Fatalf("show --data-dir: %d %s %s", code, out, stderr)
	}
}

package tracestore_test

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/ptrace"
	"go.opentelemetry.io/collector/pdata/ptrace/ptraceotlp"
	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/hostd-dev/hostd/host/telemetry"
	"github.com/hostd-dev/hostd/host/tracestore"
)

var update = flag.Bool("update", false, "rewrite golden files")

func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run with -update to create)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s differs from the output (run with -update after checking):\n--- got\n%s\n--- want\n%s", name, got, want)
	}
}

func loadScenario(t *testing.T) (*tracestore.Store, pcommon.TraceID) {
	t.Helper()
	data := t.TempDir()
	tid := writeScenario(t, filepath.Join(data, tracestore.DirName))
	st, err := tracestore.LoadDataDir(data)
	if err != nil {
		t.Fatal(err)
	}
	return st, pcommon.TraceID(tid)
}

func TestRenderGolden(t *testing.T) {
	st, tid := loadScenario(t)
	ids, err := st.Lookup("42")
	if err != nil || len(ids) != 1 || ids[0] != tid {
		t.Fatalf("lookup by broadcast id: %v %v", ids, err)
	}
	var b bytes.Buffer
	if err := tracestore.Render(&b, st, tid, tracestore.RenderOptions{}); err != nil {
		t.Fatal(err)
	}
	golden(t, "show_broadcast.golden", b.Bytes())

	b.Reset()
	if err := tracestore.Render(&b, st, tid, tracestore.RenderOptions{Compact: true, BarWidth: -1}); err != nil {
		t.Fatal(err)
	}
	golden(t, "show_broadcast_compact.golden", b.Bytes())

	lock, err := st.Lookup("c3000000000000000000000000000001")
	if err != nil {
		t.Fatal(err)
	}
	b.Reset()
	if err := tracestore.Render(&b, st, lock[0], tracestore.RenderOptions{}); err != nil {
		t.Fatal(err)
	}
	golden(t, "show_orphan.golden", b.Bytes())

	b.Reset()
	if err := tracestore.WriteSummaries(&b, st.Summaries(0)); err != nil {
		t.Fatal(err)
	}
	golden(t, "ls.golden", b.Bytes())
}

// The tree shape of the broadcast trace, across the restart, is the one of
// tracing.md: attempts are siblings under create, recovered callbacks keep
// the original trace, and the recover root is a trace of its own.
func TestTreeShapeAcrossRestart(t *testing.T) {
	st, tid := loadScenario(t)
	want := `POST /v1/broadcasts
  create broadcast
    send topic/0
    send _control/0
    send topic/0
    process broadcast
    process broadcast
    process broadcast
`
	if got := tracestore.NameTree(tracestore.BuildTree(st.Trace(tid))); got != want {
		t.Fatalf("tree:\n%s\nwant:\n%s", got, want)
	}
	var attempts []string
	for _, s := range st.Trace(tid) {
		if s.Name() == "process broadcast" {
			a, _ := s.Attr(tracestore.AttrAttempt)
			r, _ := s.Attr(tracestore.AttrRecovered)
			attempts = append(attempts, a+":"+r)
		}
	}
	if strings.Join(attempts, ",") != "1:,2:true,3:true" {
		t.Fatalf("attempts %v", attempts)
	}
	sums := st.Summaries(0)
	if len(sums) != 3 || sums[1].Root != "hostd.recover" || sums[2].Errors != 3 || sums[2].BroadcastIDs[0] != "42" {
		t.Fatalf("summaries %+v", sums)
	}
	if !sums[0].RootMissing || sums[0].Root != "POST /v1/locks" {
		t.Fatalf("orphan summary %+v", sums[0])
	}
}

// A daemon killed mid-write leaves a torn last line; a damaged middle line
// is counted as corrupt. Neither stops loading.
func TestTornAndCorruptLines(t *testing.T) {
	data := t.TempDir()
	dir := filepath.Join(data, tracestore.DirName)
	writeScenario(t, dir)
	path := filepath.Join(dir, "spans.jsonl")
	raw, _ := os.ReadFile(path)
	lines := strings.SplitAfter(string(raw), "\n")
	full := len(lines) - 1 // last element is ""
	// Corrupt line 2, tear a copy of line 1 onto the end.
	lines[1] = "{\"resourceSpans\": [garbage\n"
	torn := lines[0][:len(lines[0])/2]
	if err := os.WriteFile(path, []byte(strings.Join(lines, "")+torn), 0o644); err != nil {
		t.Fatal(err)
	}
	st, err := tracestore.LoadDataDir(data)
	if err != nil {
		t.Fatal(err)
	}
	s := st.Stats()
	if s.Torn != 1 || s.Corrupt != 1 || s.Spans != full-1 {
		t.Fatalf("stats %+v (full %d)", s, full)
	}
	ws := st.Warnings()
	if len(ws) != 2 || ws[0].Line != 2 || ws[0].Torn || !ws[1].Torn || ws[1].Line != full+1 {
		t.Fatalf("warnings %v", ws)
	}
	if !strings.Contains(ws[1].String(), "torn last line") {
		t.Fatalf("warning text %q", ws[1])
	}
}

func TestLookupErrors(t *testing.T) {
	st, _ := loadScenario(t)
	for _, arg := range []string{"43", "ffffffffffffffffffffffffffffffff", "", "zz"} {
		if _, err := st.Lookup(arg); !errors.Is(err, tracestore.ErrNotFound) {
			t.Errorf("Lookup(%q) = %v, want ErrNotFound", arg, err)
		}
	}
	if _, err := tracestore.LoadDataDir(t.TempDir()); !errors.Is(err, tracestore.ErrNoTraceDir) {
		t.Fatalf("missing dir: %v", err)
	}
	if err := tracestore.Render(io.Discard, st, pcommon.TraceID{9}, tracestore.RenderOptions{}); !errors.Is(err, tracestore.ErrNotFound) {
		t.Fatalf("render unknown: %v", err)
	}
}

// --json output is OTLP-JSON that decodes to exactly the trace's spans, with
// the resource of each process kept.
func TestOTLPRoundTrip(t *testing.T) {
	st, tid := loadScenario(t)
	td := st.OTLP(tid)
	var m ptrace.JSONMarshaler
	b, err := m.MarshalTraces(td)
	if err != nil {
		t.Fatal(err)
	}
	var u ptrace.JSONUnmarshaler
	back, err := u.UnmarshalTraces(b)
	if err != nil {
		t.Fatal(err)
	}
	if back.SpanCount() != 8 || back.ResourceSpans().Len() != 2 {
		t.Fatalf("spans %d resources %d", back.SpanCount(), back.ResourceSpans().Len())
	}
	if !strings.Contains(string(b), `"traceId":"`+tid.String()+`"`) {
		t.Fatal("trace id not hex in output")
	}
	if st.OTLP().SpanCount() != st.Stats().Spans {
		t.Fatal("OTLP() without ids must return every span")
	}
}

// Push posts protobuf OTLP to /v1/traces in batches; the collector side
// decodes every span; refused and retried requests behave.
func TestPushToCollector(t *testing.T) {
	st, _ := loadScenario(t)
	var got atomic.Int64
	var requests, fails atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		requests.Add(1)
		if r.URL.Path != "/v1/traces" || r.Header.Get("Content-Type") != "application/x-protobuf" || r.Header.Get("X-Token") != "s3cret" {
			http.Error(w, "bad request shape", http.StatusBadRequest)
			return
		}
		if fails.Add(-1) >= 0 {
			http.Error(w, "busy", http.StatusServiceUnavailable)
			return
		}
		body, _ := io.ReadAll(r.Body)
		req := ptraceotlp.NewExportRequest()
		if err := req.UnmarshalProto(body); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		got.Add(int64(req.Traces().SpanCount()))
		resp, _ := ptraceotlp.NewExportResponse().MarshalProto()
		w.Header().Set("Content-Type", "application/x-protobuf")
		_, _ = w.Write(resp)
	}))
	defer srv.Close()

	fails.Store(1) // the first request is refused with 503 and retried
	res, err := tracestore.Push(context.Background(), tracestore.PushConfig{
		Endpoint: srv.URL, BatchSize: 4, Headers: map[string]string{"X-Token": "s3cret"},
	}, st.OTLP())
	if err != nil {
		t.Fatal(err)
	}
	total := st.Stats().Spans
	if res.Spans != total || got.Load() != int64(total) || res.Requests != (total+3)/4 || requests.Load() != int32(res.Requests+1) {
		t.Fatalf("result %+v, collector got %d spans in %d requests, want %d", res, got.Load(), requests.Load(), total)
	}

	_, err = tracestore.Push(context.Background(), tracestore.PushConfig{Endpoint: srv.URL + "/elsewhere"}, st.OTLP())
	if !errors.Is(err, tracestore.ErrPush) || !strings.Contains(err.Error(), "400") {
		t.Fatalf("refused push: %v", err)
	}
	if _, err := tracestore.Push(context.Background(), tracestore.PushConfig{Endpoint: "localhost:4318"}, st.OTLP()); !errors.Is(err, tracestore.ErrPush) {
		t.Fatalf("bad endpoint: %v", err)
	}
}

func TestTracesURL(t *testing.T) {
	for in, want := range map[string]string{
		"http://h:4318":             "http://h:4318/v1/traces",
		"http://h:4318/":            "http://h:4318/v1/traces",
		"https://h/otlp/v1/traces":  "https://h/otlp/v1/traces",
		" http://h:4318/v1/traces ": "http://h:4318/v1/traces",
	} {
		if got, err := tracestore.TracesURL(in); err != nil || got != want {
			t.Errorf("TracesURL(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
}

// A cycle of parent ids (a forged file) neither loops nor loses spans.
func TestBuildTreeCycle(t *testing.T) {
	line := `{"resourceSpans":[{"scopeSpans":[{"spans":[` +
		`{"traceId":"0102030405060708090a0b0c0d0e0f10","spanId":"0000000000000001","parentSpanId":"0000000000000002","name":"a"},` +
		`{"traceId":"0102030405060708090a0b0c0d0e0f10","spanId":"0000000000000002","parentSpanId":"0000000000000001","name":"b"},` +
		`{"traceId":"0102030405060708090a0b0c0d0e0f10","spanId":"0000000000000003","parentSpanId":"0000000000000003","name":"self"}]}]}]}` + "\n"
	st := tracestore.New()
	if err := st.Add(strings.NewReader(line), "forged"); err != nil {
		t.Fatal(err)
	}
	ids, err := st.Lookup("0102030405060708090a0b0c0d0e0f10")
	if err != nil {
		t.Fatal(err)
	}
	tree := tracestore.NameTree(tracestore.BuildTree(st.Trace(ids[0])))
	for _, name := range []string{"a", "b", "self"} {
		if strings.Count(tree, "  "+name+"\n")+strings.Count(tree, "\n"+name+"\n") == 0 && !strings.Contains(tree, name) {
			t.Fatalf("span %s lost:\n%s", name, tree)
		}
	}
	if err := tracestore.Render(io.Discard, st, ids[0], tracestore.RenderOptions{}); err != nil {
		t.Fatal(err)
	}
}

// Reading the files of a running daemon: while spans are being written (and
// rotated), loads never fail, never see a corrupt line, and at most the
// last line of a file is torn (a write in progress).
func TestLoadWhileWriting(t *testing.T) {
	data := t.TempDir()
	dir := filepath.Join(data, tracestore.DirName)
	exp, err := telemetry.NewFileExporter(telemetry.FileExporterConfig{Dir: dir, MaxSize: 32 << 10, MaxFiles: 3})
	if err != nil {
		t.Fatal(err)
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(telemetry.NewFileSpanProcessor(exp, nil)))
	defer tp.Shutdown(context.Background())
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for g := range 2 {
		wg.Go(func() {
			tr := tp.Tracer("w")
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				_, s := tr.Start(context.Background(), fmt.Sprintf("op-%d-%d", g, i),
					trace.WithAttributes(attribute.String("hostd.broadcast.id", fmt.Sprint(i%7))))
				s.End()
			}
		})
	}
	for range 30 {
		st, err := tracestore.LoadDataDir(data)
		if err != nil {
			close(stop)
			wg.Wait()
			t.Fatal(err)
		}
		if s := st.Stats(); s.Corrupt != 0 || s.Torn > s.Files {
			close(stop)
			wg.Wait()
			t.Fatalf("stats %+v, warnings %v", s, st.Warnings())
		}
	}
	close(stop)
	wg.Wait()
}

// Cluster mode: a broadcast that failed over has spans in several
// replicas' data dirs. Loading them together gives the same trace as one
// dir holding every span; a span present in two dirs counts once.
func TestLoadDataDirsMerges(t *testing.T) {
	data := t.TempDir()
	tid := pcommon.TraceID(writeScenario(t, filepath.Join(data, tracestore.DirName)))
	whole, err := tracestore.LoadDataDir(data)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(filepath.Join(data, tracestore.DirName, "spans.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.SplitAfter(strings.TrimSuffix(string(raw), "\n"), "\n")
	if len(lines) < 2 {
		t.Fatalf("scenario wrote %d lines", len(lines))
	}
	a, b := t.TempDir(), t.TempDir()
	half := len(lines) / 2
	for dir, part := range map[string][]string{a: lines[:half+1], b: lines[half:]} { // one line in both
		if err := os.MkdirAll(filepath.Join(dir, tracestore.DirName), 0o755); err != nil {
			t.Fatal(err)
		}
		body := strings.Join(part, "")
		if !strings.HasSuffix(body, "\n") {
			body += "\n"
		}
		if err := os.WriteFile(filepath.Join(dir, tracestore.DirName, "spans.jsonl"), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	merged, err := tracestore.LoadDataDirs(a, b)
	if err != nil {
		t.Fatal(err)
	}
	want := tracestore.NameTree(tracestore.BuildTree(whole.Trace(tid)))
	if got := tracestore.NameTree(tracestore.BuildTree(merged.Trace(tid))); got != want {
		t.Fatalf("merged tree:\n%s\nwant:\n%s", got, want)
	}
	if merged.Stats().Spans != whole.Stats().Spans || merged.Stats().Duplicates == 0 {
		t.Fatalf("merged stats %+v, whole %+v (want the same spans, the shared line counted as duplicates)", merged.Stats(), whole.Stats())
	}
	if _, err := tracestore.LoadDataDirs(a, t.TempDir()); !errors.Is(err, tracestore.ErrNoTraceDir) {
		t.Fatalf("a dir without traces: %v", err)
	}
}

package telemetry_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"go.opentelemetry.io/collector/pdata/ptrace"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/hostd-dev/hostd/host/config"
	"github.com/hostd-dev/hostd/host/telemetry"
	"github.com/hostd-dev/hostd/host/tracestore"
)

func newFileProvider(t *testing.T, cfg telemetry.FileExporterConfig) (*sdktrace.TracerProvider, *telemetry.FileExporter) {
	t.Helper()
	exp, err := telemetry.NewFileExporter(cfg)
	if err != nil {
		t.Fatal(err)
	}
	res := resource.NewSchemaless(attribute.String("service.name", "hostd"), attribute.String("service.instance.id", "inst-1"))
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp), sdktrace.WithResource(res))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	return tp, exp
}

// Each span is on disk as soon as End returns (no batching), as one
// OTLP-JSON line with hex ids, carrying kind, attributes, events, links,
// status, the remote-parent flag and the resource.
func TestFileExporterWritesEachSpanOnEnd(t *testing.T) {
	dir := t.TempDir()
	tp, _ := newFileProvider(t, telemetry.FileExporterConfig{Dir: dir})
	tr := tp.Tracer("hostd/test")

	remote := trace.NewSpanContext(trace.SpanContextConfig{
		TraceID: trace.TraceID{0x4b, 0xf9, 0x2f, 0x35, 0x77, 0xb3, 0x4d, 0xa6, 0xa3, 0xce, 0x92, 0x9d, 0x0e, 0x0e, 0x47, 0x36},
		SpanID:  trace.SpanID{0, 0xf0, 0x67, 0xaa, 0x0b, 0xa9, 0x02, 0xb7},
		Remote:  true, TraceFlags: trace.FlagsSampled,
	})
	link := trace.Link{SpanContext: trace.NewSpanContext(trace.SpanContextConfig{
		TraceID: trace.TraceID{1}, SpanID: trace.SpanID{2}, TraceFlags: trace.FlagsSampled,
	})}
	ctx := trace.ContextWithRemoteSpanContext(context.Background(), remote)
	_, span := tr.Start(ctx, "process broadcast", trace.WithSpanKind(trace.SpanKindConsumer), trace.WithLinks(link),
		trace.WithAttributes(attribute.Int("hostd.attempt", 3), attribute.Bool("hostd.recovered", true),
			attribute.String("hostd.broadcast.id", "42"), attribute.StringSlice("list", []string{"a", "b"})))
	span.AddEvent("guest.log", trace.WithAttributes(attribute.String("msg", "hello")))
	span.RecordError(errors.New("plugin trap"))
	span.SetStatus(codes.Error, "plugin trap")

	path := filepath.Join(dir, telemetry.TraceFileName)
	if b, _ := os.ReadFile(path); len(b) != 0 {
		t.Fatalf("span written before End: %q", b)
	}
	span.End()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSuffix(string(raw), "\n"), "\n")
	if len(lines) != 1 || !strings.HasSuffix(string(raw), "\n") {
		t.Fatalf("want one terminated line, got %q", raw)
	}
	// Ids are hex, as in the Collector's file exporter (not protojson base64).
	if !strings.Contains(lines[0], `"traceId":"4bf92f3577b34da6a3ce929d0e0e4736"`) ||
		!strings.Contains(lines[0], `"parentSpanId":"00f067aa0ba902b7"`) {
		t.Fatalf("ids not hex in %s", lines[0])
	}
	var u ptrace.JSONUnmarshaler
	td, err := u.UnmarshalTraces([]byte(lines[0]))
	if err != nil {
		t.Fatal(err)
	}
	rs := td.ResourceSpans().At(0)
	if v, _ := rs.Resource().Attributes().Get("service.instance.id"); v.Str() != "inst-1" {
		t.Fatalf("resource attrs: %v", rs.Resource().Attributes().AsRaw())
	}
	ss := rs.ScopeSpans().At(0)
	if ss.Scope().Name() != "hostd/test" {
		t.Fatalf("scope %q", ss.Scope().Name())
	}
	s := ss.Spans().At(0)
	if s.Kind() != ptrace.SpanKindConsumer || s.Name() != "process broadcast" {
		t.Fatalf("kind/name %v %q", s.Kind(), s.Name())
	}
	if s.Flags() != 0x301 {
		t.Fatalf("flags %#x, want sampled|has-is-remote|is-remote", s.Flags())
	}
	if v, _ := s.Attributes().Get("hostd.attempt"); v.Int() != 3 {
		t.Fatalf("attempt %v", v.AsRaw())
	}
	if v, _ := s.Attributes().Get("list"); v.Slice().Len() != 2 {
		t.Fatalf("slice attr %v", v.AsRaw())
	}
	if s.Status().Code() != ptrace.StatusCodeError || s.Status().Message() != "plugin trap" {
		t.Fatalf("status %v %q", s.Status().Code(), s.Status().Message())
	}
	if s.Events().Len() != 2 || s.Events().At(1).Name() != "exception" {
		t.Fatalf("events %d", s.Events().Len())
	}
	if s.Links().Len() != 1 || s.Links().At(0).TraceID().String() != "01000000000000000000000000000000" {
		t.Fatalf("links %d", s.Links().Len())
	}
	if s.EndTimestamp() <= s.StartTimestamp() {
		t.Fatal("timestamps")
	}
	// Also valid plain JSON.
	var anyJSON map[string]any
	if err := json.Unmarshal([]byte(lines[0]), &anyJSON); err != nil {
		t.Fatal(err)
	}
}

// Rotation keeps at most MaxFiles files, each under MaxSize (a line is never
// split), newest in spans.jsonl, and the reader sees exactly the spans of the
// files kept.
func TestFileExporterRotation(t *testing.T) {
	dir := t.TempDir()
	tp, exp := newFileProvider(t, telemetry.FileExporterConfig{Dir: dir, MaxSize: 4096, MaxFiles: 3})
	tr := tp.Tracer("rot")
	for i := range 200 {
		_, s := tr.Start(context.Background(), fmt.Sprintf("span-%03d", i))
		s.End()
	}
	st := exp.Stats()
	if st.Spans != 200 || st.Rotations == 0 || st.Errors != 0 {
		t.Fatalf("stats %+v", st)
	}
	entries, _ := os.ReadDir(dir)
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
		info, _ := e.Info()
		if info.Size() > 4096 {
			t.Errorf("%s is %d bytes > max", e.Name(), info.Size())
		}
	}
	if strings.Join(names, ",") != "spans-1.jsonl,spans-2.jsonl,spans.jsonl" {
		t.Fatalf("files %v", names)
	}
	store, err := tracestore.LoadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if store.Stats().Torn+store.Stats().Corrupt != 0 {
		t.Fatalf("warnings %v", store.Warnings())
	}
	// The newest span is kept, the oldest rotated out, and the kept ones are
	// a contiguous suffix.
	sums := store.Summaries(0)
	if sums[0].Root != "span-199" {
		t.Fatalf("newest %q", sums[0].Root)
	}
	n := len(sums)
	if n >= 200 || n < 10 || sums[n-1].Root != fmt.Sprintf("span-%03d", 200-n) {
		t.Fatalf("kept %d spans, oldest %q", n, sums[n-1].Root)
	}
}

// Many goroutines ending spans at once through the lock-free processor:
// every line is whole and every span is there once (run with -race).
func TestFileExporterConcurrentHammer(t *testing.T) {
	dir := t.TempDir()
	exp, err := telemetry.NewFileExporter(telemetry.FileExporterConfig{Dir: dir, MaxSize: 64 << 10, MaxFiles: 1000})
	if err != nil {
		t.Fatal(err)
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(telemetry.NewFileSpanProcessor(exp, nil)))
	defer tp.Shutdown(context.Background())
	tr := tp.Tracer("hammer")
	const G, N = 8, 150
	var wg sync.WaitGroup
	for g := range G {
		wg.Go(func() {
			for i := range N {
				_, s := tr.Start(context.Background(), "op", trace.WithAttributes(attribute.Int("g", g), attribute.Int("i", i)))
				s.End()
			}
		})
	}
	wg.Wait()
	store, err := tracestore.LoadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if got := store.Stats(); got.Spans != G*N || got.Corrupt+got.Torn+got.Duplicates != 0 {
		t.Fatalf("stats %+v", got)
	}
	// Every line of every file is a complete JSON document.
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		f, _ := os.Open(filepath.Join(dir, e.Name()))
		sc := bufio.NewScanner(f)
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			if !json.Valid(sc.Bytes()) {
				t.Fatalf("%s: invalid line %q", e.Name(), sc.Text())
			}
		}
		f.Close()
	}
}

func TestFileExporterShutdownAndConfig(t *testing.T) {
	dir := t.TempDir()
	exp, err := telemetry.NewFileExporter(telemetry.FileExporterConfig{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	_, s := tp.Tracer("x").Start(context.Background(), "before")
	s.End()
	if err := tp.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := exp.Shutdown(context.Background()); err != nil {
		t.Fatalf("second shutdown: %v", err)
	}
	if exp.Stats().Spans != 1 {
		t.Fatalf("stats %+v", exp.Stats())
	}

	err = telemetry.FileExporterConfig{MaxSize: -1, MaxFiles: -2}.Validate()
	if !errors.Is(err, telemetry.ErrFileConfig) {
		t.Fatalf("want ErrFileConfig, got %v", err)
	}
	for _, want := range []string{"dir is empty", "max size -1", "max files -2"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q lacks %q", err, want)
		}
	}
	if err := (telemetry.FileExporterConfig{Dir: dir}).Validate(); err != nil {
		t.Fatal(err)
	}
	if got := telemetry.TraceDir("/data"); got != filepath.Join("/data", tracestore.DirName) {
		t.Fatalf("TraceDir %q disagrees with tracestore.DirName", got)
	}
}

// The default config exports through the file exporter into the data
// directory; each span is readable as soon as it ends, with the instance id
// of this start as a resource attribute.
func TestDefaultExporterIsFile(t *testing.T) {
	cfg := config.Default()
	if cfg.Telemetry.Traces.Exporter != "file" {
		t.Fatalf("default exporter %q", cfg.Telemetry.Traces.Exporter)
	}
	data := t.TempDir()
	p, err := telemetry.New(context.Background(), cfg.Telemetry, telemetry.Options{DataDir: data})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Shutdown(context.Background())
	_, s := p.TracerProvider.Tracer("t").Start(context.Background(), "op")
	s.End()
	st, err := tracestore.LoadDataDir(data)
	if err != nil {
		t.Fatal(err)
	}
	sums := st.Summaries(0)
	if len(sums) != 1 || sums[0].Root != "op" {
		t.Fatalf("summaries %+v", sums)
	}
	sp := st.Trace(sums[0].TraceID)[0]
	if v, _ := sp.Resource.Attributes().Get("service.instance.id"); v.Str() != p.InstanceID {
		t.Fatalf("instance id %q, want %q", v.Str(), p.InstanceID)
	}

	// No data directory: nothing is written and nothing fails.
	p2, err := telemetry.New(context.Background(), cfg.Telemetry, telemetry.Options{})
	if err != nil {
		t.Fatal(err)
	}
	_, s = p2.TracerProvider.Tracer("t").Start(context.Background(), "op")
	s.End()
	_ = p2.Shutdown(context.Background())
}

// The processor skips unsampled spans, and reports write errors (rate
// limited) while counting each.
func TestFileSpanProcessorSamplingAndErrors(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "traces")
	exp, err := telemetry.NewFileExporter(telemetry.FileExporterConfig{Dir: dir, MaxSize: 4096, MaxFiles: 2})
	if err != nil {
		t.Fatal(err)
	}
	var reported []error
	var mu sync.Mutex
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(telemetry.NewFileSpanProcessor(exp, func(err error) {
		mu.Lock()
		reported = append(reported, err)
		mu.Unlock()
	})), sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.AlwaysSample())))
	defer tp.Shutdown(context.Background())
	tr := tp.Tracer("p")
	unsampled := trace.ContextWithRemoteSpanContext(context.Background(), trace.NewSpanContext(trace.SpanContextConfig{
		TraceID: trace.TraceID{1}, SpanID: trace.SpanID{1}, Remote: true}))
	_, s := tr.Start(unsampled, "dropped")
	s.End()
	_, s = tr.Start(context.Background(), "kept")
	s.End()
	if st := exp.Stats(); st.Spans != 1 {
		t.Fatalf("stats %+v: the unsampled span was written", st)
	}
	// The folder disappears: rotation cannot reopen the file.
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	for range 100 {
		_, s := tr.Start(context.Background(), strings.Repeat("x", 200))
		s.End()
	}
	mu.Lock()
	defer mu.Unlock()
	if exp.Stats().Errors == 0 || len(reported) != 1 {
		t.Fatalf("errors counted %d, reported %d (want all counted, one reported)", exp.Stats().Errors, len(reported))
	}
}

package telemetry

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// spanFilesNewestFirst lists the exporter's span files, spans.jsonl first.
func spanFilesNewestFirst(t *testing.T, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	num := func(name string) int {
		if name == TraceFileName {
			return 0
		}
		var n int
		for _, c := range name[len("spans-") : len(name)-len(".jsonl")] {
			n = n*10 + int(c-'0')
		}
		return n
	}
	sort.Slice(names, func(i, j int) bool { return num(names[i]) < num(names[j]) })
	return names
}

// lineOnDisk reports whether a line with the span id is in a span file.
// It holds the exporter's file lock so that no rotation moves files while
// it reads.
func lineOnDisk(t *testing.T, e *FileExporter, id trace.SpanID) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	want := []byte(`"spanId":"` + id.String() + `"`)
	for _, name := range spanFilesNewestFirst(t, e.cfg.Dir) {
		b, err := os.ReadFile(filepath.Join(e.cfg.Dir, name))
		if err != nil {
			t.Error(err)
			return false
		}
		if bytes.Contains(b, want) {
			return true
		}
	}
	return false
}

// Many goroutines end spans at once through the group-committing writer
// (run with -race): each span's line is in a file when its End returns,
// and in the end every span is there exactly once, every line is whole
// JSON, across many rotations, and the counters agree.
func TestFileExporterGroupCommitHammer(t *testing.T) {
	dir := t.TempDir()
	exp, err := NewFileExporter(FileExporterConfig{Dir: dir, MaxSize: 16 << 10, MaxFiles: 1000})
	if err != nil {
		t.Fatal(err)
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(NewFileSpanProcessor(exp, func(err error) { t.Error(err) })))
	defer tp.Shutdown(context.Background())
	tr := tp.Tracer("hammer")
	const G, N = 16, 60
	var (
		wg    sync.WaitGroup
		idsMu sync.Mutex
		ids   = map[string]bool{}
	)
	for g := range G {
		wg.Go(func() {
			for i := range N {
				_, s := tr.Start(context.Background(), "op", trace.WithAttributes(attribute.Int("g", g), attribute.Int("i", i)))
				s.End()
				id := s.SpanContext().SpanID()
				if !lineOnDisk(t, exp, id) {
					t.Errorf("span %s (g %d, i %d): not on disk after End returned", id, g, i)
					return
				}
				idsMu.Lock()
				ids[id.String()] = true
				idsMu.Unlock()
			}
		})
	}
	wg.Wait()
	if t.Failed() {
		return
	}

	seen := map[string]int{}
	lines := 0
	files := spanFilesNewestFirst(t, dir)
	for _, name := range files {
		f, err := os.Open(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(f)
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			lines++
			var doc struct {
				ResourceSpans []struct {
					ScopeSpans []struct {
						Spans []struct {
							SpanID string `json:"spanId"`
						} `json:"spans"`
					} `json:"scopeSpans"`
				} `json:"resourceSpans"`
			}
			if err := json.Unmarshal(sc.Bytes(), &doc); err != nil {
				t.Fatalf("%s:%d: invalid line %q: %v", name, lines, sc.Text(), err)
			}
			for _, rs := range doc.ResourceSpans {
				for _, ss := range rs.ScopeSpans {
					for _, s := range ss.Spans {
						seen[s.SpanID]++
					}
				}
			}
		}
		if err := sc.Err(); err != nil {
			t.Fatal(err)
		}
		f.Close()
	}
	if len(files) < 2 {
		t.Fatalf("%d span file(s): the test did not rotate", len(files))
	}
	if len(seen) != G*N || len(ids) != G*N {
		t.Fatalf("%d distinct spans on disk, %d ended, want %d", len(seen), len(ids), G*N)
	}
	for id, n := range seen {
		if n != 1 || !ids[id] {
			t.Fatalf("span %s: %d line(s), ended by the test: %v", id, n, ids[id])
		}
	}
	st := exp.Stats()
	if lines != G*N || st.Spans != G*N || st.Errors != 0 || st.Rotations != uint64(len(files)-1) || st.Writes == 0 || st.Writes > G*N {
		t.Fatalf("stats %+v, %d lines in %d files", st, lines, len(files))
	}
	t.Logf("%d lines in %d writes, %d files", lines, st.Writes, len(files))
}

// When the writes of a group fail, every caller of the group gets the
// error and each line is counted once in Errors, none in Spans.
func TestFileExporterGroupWriteErrors(t *testing.T) {
	exp, err := NewFileExporter(FileExporterConfig{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer exp.Shutdown(context.Background())
	span := typicalSpan(t)
	// Fault: the file is closed under the exporter, so every write fails.
	exp.mu.Lock()
	if err := exp.f.Close(); err != nil {
		t.Fatal(err)
	}
	exp.mu.Unlock()
	const G, N = 8, 50
	var wg sync.WaitGroup
	for g := range G {
		wg.Go(func() {
			for i := range N {
				err := exp.ExportSpans(context.Background(), []sdktrace.ReadOnlySpan{span})
				if !errors.Is(err, os.ErrClosed) {
					t.Errorf("g %d, i %d: err %v, want os.ErrClosed", g, i, err)
				}
			}
		})
	}
	wg.Wait()
	if st := exp.Stats(); st.Errors != G*N || st.Spans != 0 || st.Bytes != 0 || st.Writes == 0 || st.Writes > G*N {
		t.Fatalf("stats %+v, want %d errors and nothing written", st, G*N)
	}
}

package telemetry

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// The embedded trace exporter (tracing.md, "Inspection"): every finished
// span is written as one line of OTLP-JSON (one TracesData per line, ids in
// hex — the OpenTelemetry Collector file-exporter format) to
// <data dir>/traces/spans.jsonl, with size-based rotation to
// spans-1.jsonl (newest rotated) … spans-<MaxFiles-1>.jsonl (oldest).
//
// Durability model: each span is one plain write(2) of a whole line, made
// when the span ends, and never fsynced. A process killed with SIGKILL loses
// only the spans that had not ended (the kernel keeps what was written); a
// power loss may lose more. A line cut short by a crash is skipped, with a
// counted warning, by host/tracestore.
//
// Group commit (the leader/follower pattern of runtime/wal/append.go):
// each ExportSpans call marshals its line without a lock and queues it. The
// first caller to find no writer running becomes the writer: it takes every
// queued line (its own and others') and writes them with one write(2) —
// several around a rotation, which happens only between lines — then hands
// the writer role to the oldest line queued meanwhile, or goes idle. Every
// caller returns only after its own line was written or its error is known,
// so the durability model above holds per span. There is no timer and no
// background goroutine: a lone span is written at once, by its own caller.
//
// Locking: FileExporter.qmu guards the queue and the writing flag (held
// only to queue, to take the queue and to hand off — never across I/O).
// FileExporter.mu guards the open file, its size, the rotation, closed and
// stats; the writer holds it across its writes, and only Stats and
// Shutdown contend with it. Lock order: mu, then qmu (the writer takes the
// queue and hands off under mu); mu is never taken while holding qmu.

const (
	// TraceDirName is the folder under the data directory holding span files.
	TraceDirName = "traces"
	// TraceFileName is the file being written; rotated files are named
	// spans-N.jsonl, N=1 being the most recent.
	TraceFileName = "spans.jsonl"

	// DefaultFileMaxSize is the default size at which spans.jsonl is rotated.
	DefaultFileMaxSize = 64 << 20
	// DefaultFileMaxFiles is the default number of span files kept,
	// spans.jsonl included.
	DefaultFileMaxFiles = 5
)

// ErrFileConfig is returned (wrapped) by FileExporterConfig.Validate.
var ErrFileConfig = errors.New("telemetry: invalid file exporter config")

// FileExporterConfig configures the embedded file exporter.
type FileExporterConfig struct {
	// Dir is the folder the span files are written to, normally
	// <data dir>/traces (see TraceDir). Required.
	Dir string
	// MaxSize is the size in bytes at which the current file is rotated.
	// Default DefaultFileMaxSize (64 MiB). A single line larger than MaxSize
	// is still written whole, into a file of its own.
	MaxSize int64
	// MaxFiles is how many files are kept, the current one included; the
	// oldest is deleted on rotation. Default DefaultFileMaxFiles (5).
	// 1 keeps only the current file (it is truncated on rotation).
	MaxFiles int
}

// TraceDir returns the span folder of a data directory.
func TraceDir(dataDir string) string { return filepath.Join(dataDir, TraceDirName) }

func (c *FileExporterConfig) setDefaults() {
	if c.MaxSize == 0 {
		c.MaxSize = DefaultFileMaxSize
	}
	if c.MaxFiles == 0 {
		c.MaxFiles = DefaultFileMaxFiles
	}
}

// Validate reports every problem of the config at once (after defaults).
func (c FileExporterConfig) Validate() error {
	c.setDefaults()
	var errs []error
	if c.Dir == "" {
		errs = append(errs, fmt.Errorf("%w: dir is empty", ErrFileConfig))
	}
	if c.MaxSize < 0 {
		errs = append(errs, fmt.Errorf("%w: max size %d is negative", ErrFileConfig, c.MaxSize))
	}
	if c.MaxFiles < 0 || c.MaxFiles > 1000 {
		errs = append(errs, fmt.Errorf("%w: max files %d is outside 1..1000", ErrFileConfig, c.MaxFiles))
	}
	return errors.Join(errs...)
}

// FileExporter is an sdktrace.SpanExporter writing OTLP-JSON lines. Use it
// through NewFileSpanProcessor (or sdktrace.WithSyncer), so each span is
// written when it ends. It is safe for concurrent use: batches are
// converted and marshaled without a lock, and the lines of concurrent
// calls are written together (see "Group commit" above).
type FileExporter struct {
	cfg FileExporterConfig

	qmu     sync.Mutex
	queue   []*lineReq // lines waiting for the writer, oldest first
	writing bool       // a writer is running (or was handed the role)

	mu     sync.Mutex
	f      *os.File
	size   int64
	closed bool
	stats  FileExporterStats
	batch  []*lineReq // the writer's current batch (reused)
	buf    []byte     // the writer's write buffer (reused)
}

// lineReq is one ExportSpans call's line waiting for the writer. wake
// receives one signal: either the line was written (lead false; err is its
// outcome) or the caller has become the writer (lead true).
type lineReq struct {
	line  []byte
	spans int
	err   error
	lead  bool
	wake  chan struct{}
}

// reqPool recycles lineReqs with their line buffers and wake channels.
var reqPool = sync.Pool{New: func() any {
	return &lineReq{line: make([]byte, 0, 2048), wake: make(chan struct{}, 1)}
}}

// FileExporterStats counts what the exporter did since it was opened.
type FileExporterStats struct {
	Spans     uint64 // spans written
	Bytes     uint64 // bytes written
	Rotations uint64 // rotations done
	Errors    uint64 // lines not written (failed writes or rotations)
	Writes    uint64 // write(2) calls: fewer than lines when lines were grouped
}

// NewFileExporter creates the folder if needed and opens (appending) the
// current span file.
func NewFileExporter(cfg FileExporterConfig) (*FileExporter, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg.setDefaults()
	if err := os.MkdirAll(cfg.Dir, 0o755); err != nil {
		return nil, fmt.Errorf("telemetry: create trace dir: %w", err)
	}
	e := &FileExporter{cfg: cfg}
	if err := e.open(); err != nil {
		return nil, err
	}
	return e, nil
}

func (e *FileExporter) path(n int) string {
	if n == 0 {
		return filepath.Join(e.cfg.Dir, TraceFileName)
	}
	return filepath.Join(e.cfg.Dir, "spans-"+strconv.Itoa(n)+".jsonl")
}

func (e *FileExporter) open() error {
	f, err := os.OpenFile(e.path(0), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("telemetry: open span file: %w", err)
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return fmt.Errorf("telemetry: stat span file: %w", err)
	}
	e.f, e.size = f, st.Size()
	return nil
}

// rotate closes the current file, shifts spans-N.jsonl to spans-N+1.jsonl
// (dropping the oldest) and opens a fresh spans.jsonl. Caller holds mu.
func (e *FileExporter) rotate() error {
	if err := e.f.Close(); err != nil {
		e.f = nil
		return fmt.Errorf("telemetry: close span file: %w", err)
	}
	e.f = nil
	last := e.cfg.MaxFiles - 1
	if err := os.Remove(e.path(last)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("telemetry: remove oldest span file: %w", err)
	}
	for n := last - 1; n >= 0; n-- {
		if err := os.Rename(e.path(n), e.path(n+1)); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("telemetry: rotate span file: %w", err)
		}
	}
	e.stats.Rotations++
	return e.open()
}

// ExportSpans writes the batch as one OTLP-JSON line, grouped with the
// lines of concurrent calls into one write(2) (see "Group commit" above).
// It returns after the line was written, or with the error that kept it
// from being written.
func (e *FileExporter) ExportSpans(ctx context.Context, spans []sdktrace.ReadOnlySpan) error {
	if len(spans) == 0 {
		return nil
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	r := reqPool.Get().(*lineReq)
	r.line = append(appendTracesJSON(r.line[:0], spans), '\n')
	r.spans, r.err, r.lead = len(spans), nil, false

	e.qmu.Lock()
	e.queue = append(e.queue, r)
	if e.writing {
		e.qmu.Unlock()
		<-r.wake
	} else {
		e.writing = true
		e.qmu.Unlock()
		r.lead = true
	}
	if r.lead {
		e.writeQueued(r)
	}
	err := r.err
	if cap(r.line) <= 64<<10 {
		reqPool.Put(r)
	}
	return err
}

// writeQueued is one round of the writer: it writes every queued line
// (me's included), then wakes their callers and hands the writer role to
// the oldest line queued meanwhile, if any.
func (e *FileExporter) writeQueued(me *lineReq) {
	e.mu.Lock()
	e.qmu.Lock()
	batch := append(e.batch[:0], e.queue...)
	clear(e.queue)
	e.queue = e.queue[:0]
	e.qmu.Unlock()
	e.writeBatch(batch)

	e.qmu.Lock()
	var next *lineReq
	if len(e.queue) > 0 {
		next = e.queue[0]
		next.lead = true
	} else {
		e.writing = false
	}
	e.qmu.Unlock()
	// Still under mu: the next writer reuses e.batch only after this loop.
	for i, r := range batch {
		batch[i] = nil
		if r != me {
			r.wake <- struct{}{} // r may be reused once signaled
		}
	}
	e.batch = batch
	e.mu.Unlock()
	if next != nil {
		next.wake <- struct{}{}
	}
}

// writeBatch writes the lines of batch, as few writes as rotation allows,
// and sets each line's err. Stats count per line. Caller holds mu.
func (e *FileExporter) writeBatch(batch []*lineReq) {
	if e.closed {
		return // like the SDK's exporters: spans after Shutdown are dropped
	}
	first := 0 // batch[first:i] are the lines in e.buf
	e.buf = e.buf[:0]
	for i, r := range batch {
		if e.f != nil && (e.size+int64(len(e.buf)) == 0 || e.size+int64(len(e.buf)+len(r.line)) <= e.cfg.MaxSize) {
			e.buf = append(e.buf, r.line...)
			continue
		}
		e.flush(batch[first:i])
		first = i
		var rerr error
		if e.f == nil {
			rerr = e.open()
		} else {
			rerr = e.rotate()
		}
		if rerr != nil {
			e.stats.Errors++
			r.err = rerr
			first = i + 1
			continue
		}
		e.buf = append(e.buf, r.line...)
	}
	e.flush(batch[first:])
	if cap(e.buf) > 1<<20 {
		e.buf = nil
	}
}

// flush writes e.buf, which holds the lines of lines, with one write(2):
// the lines wholly written count as written, the others get the error.
// Caller holds mu.
func (e *FileExporter) flush(lines []*lineReq) {
	if len(e.buf) == 0 {
		return
	}
	n, err := e.f.Write(e.buf)
	e.buf = e.buf[:0]
	e.stats.Writes++
	e.size += int64(n)
	e.stats.Bytes += uint64(n)
	for _, r := range lines {
		if n >= len(r.line) {
			n -= len(r.line)
			e.stats.Spans += uint64(r.spans)
			continue
		}
		n = 0
		e.stats.Errors++
		if err == nil {
			err = io.ErrShortWrite
		}
		r.err = fmt.Errorf("telemetry: write span file: %w", err)
	}
}

// Stats returns counters of the exporter's work.
func (e *FileExporter) Stats() FileExporterStats {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.stats
}

// Shutdown closes the file; later exports are dropped. It is idempotent.
func (e *FileExporter) Shutdown(ctx context.Context) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return nil
	}
	e.closed = true
	if e.f == nil {
		return nil
	}
	err := e.f.Close()
	e.f = nil
	if err != nil {
		return fmt.Errorf("telemetry: close span file: %w", err)
	}
	return nil
}

var _ sdktrace.SpanExporter = (*FileExporter)(nil)

// FileSpanProcessor writes each sampled span through a FileExporter as soon
// as it ends. Unlike sdktrace's SimpleSpanProcessor it holds no lock of its
// own around the export: spans ending on different goroutines are
// converted and marshaled concurrently, and their lines are written
// together by the exporter's group commit. Export errors are counted in the
// exporter's Stats and passed to OnError (at most one call per 10 s).
type FileSpanProcessor struct {
	exp     *FileExporter
	onError func(error)

	errMu   sync.Mutex
	lastErr time.Time
}

// NewFileSpanProcessor returns a processor for exp; onError may be nil.
func NewFileSpanProcessor(exp *FileExporter, onError func(error)) *FileSpanProcessor {
	return &FileSpanProcessor{exp: exp, onError: onError}
}

// OnStart does nothing.
func (p *FileSpanProcessor) OnStart(context.Context, sdktrace.ReadWriteSpan) {}

// OnEnd writes the span if it is sampled.
func (p *FileSpanProcessor) OnEnd(s sdktrace.ReadOnlySpan) {
	if !s.SpanContext().IsSampled() {
		return
	}
	if err := p.exp.ExportSpans(context.Background(), []sdktrace.ReadOnlySpan{s}); err != nil && p.onError != nil {
		p.errMu.Lock()
		report := time.Since(p.lastErr) >= 10*time.Second
		if report {
			p.lastErr = time.Now()
		}
		p.errMu.Unlock()
		if report {
			p.onError(err)
		}
	}
}

// ForceFlush does nothing: every span is written when it ends.
func (p *FileSpanProcessor) ForceFlush(context.Context) error { return nil }

// Shutdown closes the exporter.
func (p *FileSpanProcessor) Shutdown(ctx context.Context) error { return p.exp.Shutdown(ctx) }

var _ sdktrace.SpanProcessor = (*FileSpanProcessor)(nil)

package tracestore

import (
	"bufio"
	"bytes"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/ptrace"
)

// Attribute keys the store indexes and the renderer highlights (tracing.md).
const (
	AttrBroadcastID = "hostd.broadcast.id"
	AttrAttempt     = "hostd.attempt"
	AttrRecovered   = "hostd.recovered"
	AttrPlugin      = "hostd.plugin"
)

// DirName is the folder of span files under a data directory; it matches
// host/telemetry.TraceDirName.
const DirName = "traces"

// MaxLineSize bounds one line of a span file; a longer line is counted as
// corrupt rather than read into memory.
const MaxLineSize = 64 << 20

// Errors returned by Lookup and the loaders.
var (
	// ErrNotFound: no trace has the given trace id or broadcast id.
	ErrNotFound = errors.New("tracestore: no such trace")
	// ErrNoTraceDir: the data directory has no traces folder.
	ErrNoTraceDir = errors.New("tracestore: no trace directory")
)

// Span is one stored span with the resource and scope it was exported with.
type Span struct {
	ptrace.Span
	Resource pcommon.Resource
	Scope    pcommon.InstrumentationScope
	// File and Line say where the span was read from.
	File string
	Line int
}

// Start and End return the span's timestamps as time.Time.
func (s *Span) Start() time.Time { return s.StartTimestamp().AsTime() }

// End returns the span's end time.
func (s *Span) End() time.Time { return s.EndTimestamp().AsTime() }

// Attr returns an attribute rendered as a string, and whether it exists.
func (s *Span) Attr(key string) (string, bool) {
	v, ok := s.Attributes().Get(key)
	if !ok {
		return "", false
	}
	return v.AsString(), true
}

// Warning describes one line that could not be read.
type Warning struct {
	File string
	Line int
	Torn bool // the file's unterminated last line
	Err  error
}

func (w Warning) String() string {
	kind := "corrupt line"
	if w.Torn {
		kind = "torn last line (skipped)"
	}
	return fmt.Sprintf("%s:%d: %s: %v", w.File, w.Line, kind, w.Err)
}

// Stats counts what loading read.
type Stats struct {
	Files      int
	Lines      int
	Spans      int
	Duplicates int // spans seen again (same trace and span id), kept once
	Torn       int // unterminated, undecodable last lines
	Corrupt    int // other undecodable lines
	Vanished   int // files listed but rotated away before they were read
}

// Store holds spans indexed by trace id and broadcast id. A Store is built
// by one goroutine (the loaders) and is then safe for concurrent reads.
type Store struct {
	spans    []*Span
	byTrace  map[pcommon.TraceID][]*Span
	bySpan   map[spanKey]*Span
	byBcast  map[string][]pcommon.TraceID
	warnings []Warning
	stats    Stats
}

type spanKey struct {
	t pcommon.TraceID
	s pcommon.SpanID
}

// New returns an empty store.
func New() *Store {
	return &Store{
		byTrace: map[pcommon.TraceID][]*Span{},
		bySpan:  map[spanKey]*Span{},
		byBcast: map[string][]pcommon.TraceID{},
	}
}

// LoadDataDir loads every span file of a hostd data directory.
func LoadDataDir(dataDir string) (*Store, error) {
	return LoadDir(filepath.Join(dataDir, DirName))
}

// LoadDataDirs loads the span files of several data directories into one
// Store: a broadcast that failed over between cluster replicas has spans
// in each replica's directory. A span found twice counts once.
func LoadDataDirs(dataDirs ...string) (*Store, error) {
	st := New()
	for _, d := range dataDirs {
		if err := st.AddDir(filepath.Join(d, DirName)); err != nil {
			return nil, err
		}
	}
	return st, nil
}

// LoadDir loads every *.jsonl file of dir, oldest rotation first
// (spans-N.jsonl with the highest N first, spans.jsonl last). Only I/O
// errors fail it; damaged lines become warnings.
func LoadDir(dir string) (*Store, error) {
	st := New()
	if err := st.AddDir(dir); err != nil {
		return nil, err
	}
	return st, nil
}

// AddDir adds every *.jsonl file of dir, as LoadDir does.
func (st *Store) AddDir(dir string) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("%w: %s (has the daemon run with the file exporter?)", ErrNoTraceDir, dir)
		}
		return fmt.Errorf("tracestore: %w", err)
	}
	var names []string
	for _, e := range entries {
		if !e.IsDir() && strings.HasSuffix(e.Name(), ".jsonl") {
			names = append(names, e.Name())
		}
	}
	sort.Slice(names, func(i, j int) bool { return fileAge(names[i]) > fileAge(names[j]) })
	for _, n := range names {
		if err := st.AddFile(filepath.Join(dir, n)); err != nil {
			// A running daemon may rotate files away between the listing
			// and the open; what moved is read under its new name or is
			// gone with the oldest file.
			if errors.Is(err, os.ErrNotExist) {
				st.stats.Vanished++
				continue
			}
			return err
		}
	}
	return nil
}

// fileAge orders rotated files: spans-3.jsonl (3) is older than
// spans-1.jsonl (1), which is older than spans.jsonl (0); other names sort
// first (-1 as "unknown, treat as oldest" would reorder them arbitrarily,
// so they get a large age and keep name order via the stable fallback).
func fileAge(name string) int {
	base := strings.TrimSuffix(name, ".jsonl")
	if base == "spans" {
		return 0
	}
	if n, ok := strings.CutPrefix(base, "spans-"); ok {
		if i, err := strconv.Atoi(n); err == nil && i > 0 {
			return i
		}
	}
	return 1 << 30
}

// AddFile reads one span file into the store.
func (st *Store) AddFile(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("tracestore: %w", err)
	}
	defer f.Close()
	return st.Add(f, path)
}

// Add reads OTLP-JSON lines from r; name is used in warnings.
func (st *Store) Add(r io.Reader, name string) error {
	st.stats.Files++
	br := bufio.NewReaderSize(r, 256<<10)
	for lineNo := 1; ; lineNo++ {
		line, tooLong, err := readLine(br)
		if err != nil && !errors.Is(err, io.EOF) {
			return fmt.Errorf("tracestore: read %s: %w", name, err)
		}
		eof := errors.Is(err, io.EOF)
		if eof && len(line) == 0 && !tooLong {
			return nil
		}
		terminated := !eof
		st.stats.Lines++
		switch {
		case tooLong:
			st.warn(Warning{File: name, Line: lineNo, Torn: !terminated, Err: fmt.Errorf("line longer than %d bytes", MaxLineSize)})
		case len(bytes.TrimSpace(line)) == 0:
			st.stats.Lines--
		default:
			td, derr := DecodeLine(line)
			if derr != nil {
				st.warn(Warning{File: name, Line: lineNo, Torn: !terminated, Err: derr})
			} else {
				st.addTraces(td, name, lineNo)
			}
		}
		if eof {
			return nil
		}
	}
}

// readLine reads up to and without the next '\n'. A line over MaxLineSize is
// consumed and reported as tooLong with no bytes.
func readLine(br *bufio.Reader) (line []byte, tooLong bool, err error) {
	var buf []byte
	for {
		chunk, err := br.ReadSlice('\n')
		if !tooLong {
			if len(buf)+len(chunk) > MaxLineSize {
				tooLong, buf = true, nil
			} else {
				buf = append(buf, chunk...)
			}
		}
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		if err == nil {
			buf = buf[:len(buf)-1]
		}
		return buf, tooLong, err
	}
}

func (st *Store) warn(w Warning) {
	if w.Torn {
		st.stats.Torn++
	} else {
		st.stats.Corrupt++
	}
	st.warnings = append(st.warnings, w)
}

// DecodeLine decodes one line of a span file. It never panics: a panic in
// the decoder is turned into an error.
func DecodeLine(line []byte) (td ptrace.Traces, err error) {
	defer func() {
		if r := recover(); r != nil {
			td, err = ptrace.Traces{}, fmt.Errorf("tracestore: decoder panic: %v", r)
		}
	}()
	line = bytes.TrimSpace(line)
	if len(line) == 0 || line[0] != '{' {
		return ptrace.Traces{}, errors.New("tracestore: not a JSON object")
	}
	var u ptrace.JSONUnmarshaler
	td, err = u.UnmarshalTraces(line)
	if err != nil {
		return ptrace.Traces{}, fmt.Errorf("tracestore: decode OTLP-JSON: %w", err)
	}
	return td, nil
}

func (st *Store) addTraces(td ptrace.Traces, file string, line int) {
	rss := td.ResourceSpans()
	for i := 0; i < rss.Len(); i++ {
		rs := rss.At(i)
		sss := rs.ScopeSpans()
		for j := 0; j < sss.Len(); j++ {
			ss := sss.At(j)
			spans := ss.Spans()
			for k := 0; k < spans.Len(); k++ {
				st.addSpan(&Span{Span: spans.At(k), Resource: rs.Resource(), Scope: ss.Scope(), File: file, Line: line})
			}
		}
	}
}

func (st *Store) addSpan(s *Span) {
	key := spanKey{s.TraceID(), s.SpanID()}
	if _, dup := st.bySpan[key]; dup {
		st.stats.Duplicates++
		return
	}
	st.stats.Spans++
	st.bySpan[key] = s
	st.spans = append(st.spans, s)
	tid := s.TraceID()
	st.byTrace[tid] = append(st.byTrace[tid], s)
	if b, ok := s.Attr(AttrBroadcastID); ok && b != "" {
		if !slices.Contains(st.byBcast[b], tid) {
			st.byBcast[b] = append(st.byBcast[b], tid)
		}
	}
}

// Stats returns the counters of what was loaded.
func (st *Store) Stats() Stats { return st.stats }

// Warnings returns the damaged lines met while loading.
func (st *Store) Warnings() []Warning { return slices.Clone(st.warnings) }

// Trace returns the spans of a trace, ordered by start time.
func (st *Store) Trace(id pcommon.TraceID) []*Span {
	out := slices.Clone(st.byTrace[id])
	sortSpans(out)
	return out
}

// Span returns one span by ids.
func (st *Store) Span(t pcommon.TraceID, s pcommon.SpanID) (*Span, bool) {
	sp, ok := st.bySpan[spanKey{t, s}]
	return sp, ok
}

// TraceIDs returns all trace ids, most recently started first.
func (st *Store) TraceIDs() []pcommon.TraceID {
	out := make([]pcommon.TraceID, 0, len(st.byTrace))
	for id := range st.byTrace {
		out = append(out, id)
	}
	starts := map[pcommon.TraceID]pcommon.Timestamp{}
	for _, id := range out {
		starts[id] = st.traceStart(id)
	}
	sort.Slice(out, func(i, j int) bool {
		if starts[out[i]] != starts[out[j]] {
			return starts[out[i]] > starts[out[j]]
		}
		return out[i].String() < out[j].String()
	})
	return out
}

func (st *Store) traceStart(id pcommon.TraceID) pcommon.Timestamp {
	var min pcommon.Timestamp
	for i, s := range st.byTrace[id] {
		if i == 0 || s.StartTimestamp() < min {
			min = s.StartTimestamp()
		}
	}
	return min
}

// ParseTraceID parses 32 hex digits.
func ParseTraceID(s string) (pcommon.TraceID, bool) {
	var id pcommon.TraceID
	if len(s) != 32 {
		return id, false
	}
	if _, err := hex.Decode(id[:], []byte(s)); err != nil {
		return id, false
	}
	return id, !id.IsEmpty()
}

// Lookup resolves a trace id (32 hex digits) or a broadcast id (the
// hostd.broadcast.id attribute) to the trace ids it names, oldest first.
// It returns ErrNotFound when neither matches.
func (st *Store) Lookup(arg string) ([]pcommon.TraceID, error) {
	arg = strings.TrimSpace(arg)
	if id, ok := ParseTraceID(strings.ToLower(arg)); ok {
		if _, found := st.byTrace[id]; found {
			return []pcommon.TraceID{id}, nil
		}
	}
	if ids := st.byBcast[arg]; len(ids) > 0 {
		out := slices.Clone(ids)
		sort.Slice(out, func(i, j int) bool { return st.traceStart(out[i]) < st.traceStart(out[j]) })
		return out, nil
	}
	return nil, fmt.Errorf("%w: %q is neither a stored trace id nor a broadcast id", ErrNotFound, arg)
}

// OTLP returns the spans of the given traces (all traces when none is
// given) as one TracesData, spans grouped by resource and scope.
func (st *Store) OTLP(ids ...pcommon.TraceID) ptrace.Traces {
	var spans []*Span
	if len(ids) == 0 {
		spans = slices.Clone(st.spans)
	} else {
		for _, id := range ids {
			spans = append(spans, st.byTrace[id]...)
		}
	}
	sortSpans(spans)
	return toTraces(spans)
}

func toTraces(spans []*Span) ptrace.Traces {
	td := ptrace.NewTraces()
	type key struct{ res, scope string }
	resIdx := map[string]ptrace.ResourceSpans{}
	scopeIdx := map[key]ptrace.SpanSlice{}
	for _, s := range spans {
		rk := mapKey(s.Resource.Attributes())
		rs, ok := resIdx[rk]
		if !ok {
			rs = td.ResourceSpans().AppendEmpty()
			s.Resource.CopyTo(rs.Resource())
			resIdx[rk] = rs
		}
		sk := key{rk, s.Scope.Name() + "\x00" + s.Scope.Version() + "\x00" + mapKey(s.Scope.Attributes())}
		sl, ok := scopeIdx[sk]
		if !ok {
			ss := rs.ScopeSpans().AppendEmpty()
			s.Scope.CopyTo(ss.Scope())
			sl = ss.Spans()
			scopeIdx[sk] = sl
		}
		s.Span.CopyTo(sl.AppendEmpty())
	}
	return td
}

func mapKey(m pcommon.Map) string {
	keys := make([]string, 0, m.Len())
	for k, v := range m.All() {
		keys = append(keys, strconv.Quote(k)+"="+strconv.Quote(v.AsString()))
	}
	sort.Strings(keys)
	return strings.Join(keys, ",")
}

func sortSpans(spans []*Span) {
	sort.SliceStable(spans, func(i, j int) bool {
		a, b := spans[i], spans[j]
		if a.StartTimestamp() != b.StartTimestamp() {
			return a.StartTimestamp() < b.StartTimestamp()
		}
		return a.SpanID().String() < b.SpanID().String()
	})
}

// Summary describes one trace for listings.
type Summary struct {
	TraceID      pcommon.TraceID
	Root         string // name of the root span, or of the earliest span
	RootMissing  bool   // no span without a parent: the root was not exported
	Start        time.Time
	Duration     time.Duration
	Spans        int
	Errors       int
	BroadcastIDs []string
}

// Summaries lists traces most recently started first; limit <= 0 means all.
func (st *Store) Summaries(limit int) []Summary {
	ids := st.TraceIDs()
	if limit > 0 && len(ids) > limit {
		ids = ids[:limit]
	}
	out := make([]Summary, 0, len(ids))
	for _, id := range ids {
		out = append(out, st.Summary(id))
	}
	return out
}

// Summary describes one trace.
func (st *Store) Summary(id pcommon.TraceID) Summary {
	spans := st.Trace(id)
	sum := Summary{TraceID: id, Spans: len(spans), RootMissing: true}
	var start, end pcommon.Timestamp
	for i, s := range spans {
		if i == 0 || s.StartTimestamp() < start {
			start = s.StartTimestamp()
		}
		if s.EndTimestamp() > end {
			end = s.EndTimestamp()
		}
		if s.Status().Code() == ptrace.StatusCodeError {
			sum.Errors++
		}
		if sum.RootMissing && s.ParentSpanID().IsEmpty() {
			sum.Root, sum.RootMissing = s.Name(), false
		}
		if b, ok := s.Attr(AttrBroadcastID); ok && b != "" && !slices.Contains(sum.BroadcastIDs, b) {
			sum.BroadcastIDs = append(sum.BroadcastIDs, b)
		}
	}
	if sum.RootMissing && len(spans) > 0 {
		sum.Root = spans[0].Name()
	}
	sum.Start = start.AsTime()
	if end > start {
		sum.Duration = time.Duration(end - start)
	}
	return sum
}

// DataDirTraces is the span folder of a data directory.
func DataDirTraces(dataDir string) string { return filepath.Join(dataDir, DirName) }

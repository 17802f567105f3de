package tracestore

import (
	"bytes"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/ptrace"

	"github.com/hostd-dev/hostd/wire"
)

// This file answers the trace routes of the API (GET /v1/traces,
// GET /v1/traces/{id}) from a running daemon's own span files.

// ErrBadCursor: a page token that this package did not make.
var ErrBadCursor = errors.New("tracestore: not a trace page token")

// Cursor is a position in the newest-first order of traces: the page
// after it holds the traces that started earlier (or at the same
// nanosecond with a greater trace id).
type Cursor struct {
	StartNS int64
	TraceID pcommon.TraceID
}

// CursorOf is the position just after s.
func CursorOf(s wire.TraceSummary) (Cursor, error) {
	id, ok := ParseTraceID(strings.ToLower(s.TraceID))
	if !ok {
		return Cursor{}, fmt.Errorf("%w: trace id %q", ErrBadCursor, s.TraceID)
	}
	return Cursor{StartNS: s.Start.UnixNano(), TraceID: id}, nil
}

// Token encodes c as an opaque page token.
func (c Cursor) Token() string {
	var b [24]byte
	binary.BigEndian.PutUint64(b[:8], uint64(c.StartNS))
	copy(b[8:], c.TraceID[:])
	return base64.RawURLEncoding.EncodeToString(b[:])
}

// ParseCursor decodes a Token. An empty token is no cursor (nil).
func ParseCursor(tok string) (*Cursor, error) {
	if tok == "" {
		return nil, nil
	}
	b, err := base64.RawURLEncoding.DecodeString(tok)
	if err != nil || len(b) != 24 {
		return nil, ErrBadCursor
	}
	c := &Cursor{StartNS: int64(binary.BigEndian.Uint64(b[:8]))}
	copy(c.TraceID[:], b[8:])
	return c, nil
}

// Before reports whether a trace starting at startNS with id comes before
// c in the newest-first order (so it was on an earlier page).
func (c Cursor) Before(startNS int64, id pcommon.TraceID) bool {
	if startNS != c.StartNS {
		return startNS > c.StartNS
	}
	return bytes.Compare(id[:], c.TraceID[:]) <= 0
}

// Query selects a page of traces.
type Query struct {
	// Limit is the page size (> 0).
	Limit int
	// After, if set, is the cursor of the previous page's last trace.
	After *Cursor
	// Broadcast keeps the traces with a span of this broadcast id.
	Broadcast string
	// Root keeps the traces whose root span name contains it.
	Root string
	// Errors keeps the traces with at least one error span.
	Errors bool
}

// Match reports whether a summary passes the query's filters (not the
// cursor).
func (q Query) Match(s wire.TraceSummary) bool {
	if q.Errors && s.Errors == 0 {
		return false
	}
	if q.Broadcast != "" && !slices.Contains(s.BroadcastIDs, q.Broadcast) {
		return false
	}
	return q.Root == "" || strings.Contains(s.Root, q.Root)
}

// Page returns up to q.Limit traces after q.After, newest first, and the
// token of the next page ("" on the last).
func (st *Store) Page(q Query) ([]wire.TraceSummary, string) {
	out := []wire.TraceSummary{}
	for _, id := range st.TraceIDs() {
		sum := st.Summary(id)
		if q.After != nil && q.After.Before(sum.Start.UnixNano(), id) {
			continue
		}
		ws := sum.Wire()
		if !q.Match(ws) {
			continue
		}
		if len(out) == q.Limit {
			c, _ := CursorOf(out[len(out)-1])
			return out, c.Token()
		}
		out = append(out, ws)
	}
	return out, ""
}

// Wire converts a summary to its API shape.
func (s Summary) Wire() wire.TraceSummary {
	return wire.TraceSummary{
		TraceID: s.TraceID.String(), Root: s.Root, RootMissing: s.RootMissing, Start: s.Start.UTC(),
		Duration: s.Duration.String(), Spans: s.Spans, Errors: s.Errors,
		BroadcastIDs: append([]string{}, s.BroadcastIDs...),
	}
}

// SummaryFromWire converts an API summary back (for WriteSummaries); an
// unparsable trace id or duration becomes zero.
func SummaryFromWire(w wire.TraceSummary) Summary {
	id, _ := ParseTraceID(strings.ToLower(w.TraceID))
	d, _ := time.ParseDuration(w.Duration)
	return Summary{TraceID: id, Root: w.Root, RootMissing: w.RootMissing, Start: w.Start, Duration: d,
		Spans: w.Spans, Errors: w.Errors, BroadcastIDs: w.BroadcastIDs}
}

// Answer builds the answer of GET /v1/traces/{id} from the store: the
// traces that arg (a trace id or a broadcast id) names, as OTLP-JSON.
// It returns ErrNotFound when there are none.
func (st *Store) Answer(arg string) (wire.Trace, error) {
	ids, err := st.Lookup(arg)
	if err != nil {
		return wire.Trace{}, err
	}
	td := st.OTLP(ids...)
	raw, err := EncodeJSON(td)
	if err != nil {
		return wire.Trace{}, err
	}
	out := wire.Trace{ID: arg, TraceIDs: make([]string, len(ids)), Spans: td.SpanCount(), OTLP: raw}
	for i, id := range ids {
		out.TraceIDs[i] = id.String()
	}
	return out, nil
}

// EncodeJSON writes td as one OTLP-JSON TracesData (hex ids).
func EncodeJSON(td ptrace.Traces) ([]byte, error) {
	var m ptrace.JSONMarshaler
	b, err := m.MarshalTraces(td)
	if err != nil {
		return nil, fmt.Errorf("tracestore: encode OTLP-JSON: %w", err)
	}
	return b, nil
}

// AddJSON adds the spans of one OTLP-JSON TracesData (e.g. a replica's
// answer of GET /v1/traces/{id}); name is recorded as the spans' File.
// Spans already in the store are counted as duplicates and kept once.
func (st *Store) AddJSON(b []byte, name string) error {
	td, err := DecodeLine(b)
	if err != nil {
		return err
	}
	st.addTraces(td, name, 0)
	return nil
}

// Cache keeps the Store of one span folder and reloads it when the files
// change (a new line, a rotation), so that API reads of a daemon that
// writes no spans do not re-read its files. A reload reads every file
// again: the cost of a read after new spans grows with the folder
// (telemetry.traces file size and count bound it).
type Cache struct {
	dir string

	mu  sync.Mutex
	sig string
	st  *Store
}

// NewCache returns a cache of dir (typically <data dir>/traces). A
// folder that does not exist (yet) reads as empty.
func NewCache(dir string) *Cache { return &Cache{dir: dir} }

// Load returns the store of the folder as it is now. It is safe for
// concurrent use; the Store it returns is never modified afterwards.
func (c *Cache) Load() (*Store, error) {
	sig, err := signature(c.dir)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.st != nil && sig == c.sig {
		return c.st, nil
	}
	st := New()
	if sig != "" {
		if err := st.AddDir(c.dir); err != nil && !errors.Is(err, ErrNoTraceDir) {
			return nil, err
		}
	}
	c.st, c.sig = st, sig
	return st, nil
}

// signature names every span file with its size and modification time.
func signature(dir string) (string, error) {
	ents, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("tracestore: %w", err)
	}
	var b strings.Builder
	for _, e := range ents {
		if e.IsDir() || !strings.HasSuffix(e.Name(), ".jsonl") {
			continue
		}
		fi, err := os.Stat(filepath.Join(dir, e.Name()))
		if err != nil {
			continue // rotated away meanwhile; the next read sees the new set
		}
		b.WriteString(e.Name() + "\x00" + strconv.FormatInt(fi.Size(), 10) + "\x00" +
			strconv.FormatInt(fi.ModTime().UnixNano(), 10) + "\n")
	}
	return b.String(), nil
}

package wire

import (
	"encoding/json"
	"time"
)

// TraceSummary is one trace in GET /v1/traces (and `hostd trace ls -o
// json`).
type TraceSummary struct {
	// TraceID is the W3C trace id, 32 hex digits.
	TraceID string `json:"trace_id"`
	// Root is the name of the root span, or of the earliest span when
	// the root was not exported (RootMissing).
	Root        string `json:"root"`
	RootMissing bool   `json:"root_not_exported,omitempty"`
	// Start is the start of the earliest span.
	Start time.Time `json:"start"`
	// Duration is from the earliest start to the latest end, a Go
	// duration string.
	Duration string `json:"duration"`
	Spans    int    `json:"spans"`
	// Errors counts the spans with status Error.
	Errors int `json:"errors"`
	// BroadcastIDs are the hostd.broadcast.id attributes of its spans.
	BroadcastIDs []string `json:"broadcast_ids"`
}

// TracePage is the answer of GET /v1/traces: a page of traces, most
// recently started first. In cluster mode Members says which replicas
// answered and Missing names those that did not: their traces are absent
// from the page (a partial answer, not an error).
type TracePage struct {
	Items         []TraceSummary `json:"items"`
	NextPageToken string         `json:"next_page_token"`
	Members       []TraceMember  `json:"members,omitempty"`
	Missing       []string       `json:"missing,omitempty"`
}

// Trace is the answer of GET /v1/traces/{id}: the spans of one trace (or
// of every trace of a broadcast, when the id is a broadcast id) as one
// OTLP-JSON TracesData, the format of hostd's span files.
type Trace struct {
	// ID is the id asked for: a trace id or a broadcast id.
	ID string `json:"id"`
	// TraceIDs are the traces found, oldest first.
	TraceIDs []string `json:"trace_ids"`
	// Spans counts the spans in OTLP (each span once, also when several
	// replicas stored it).
	Spans int `json:"spans"`
	// OTLP is an OTLP-JSON TracesData ({"resourceSpans": [...]}, ids in
	// hex) holding the spans, as the OpenTelemetry file exporter writes.
	OTLP json.RawMessage `json:"otlp"`
	// Members (cluster mode) says which replicas were asked and how each
	// answered; Missing names those that did not: the trace may lack
	// their spans.
	Members []TraceMember `json:"members,omitempty"`
	Missing []string      `json:"missing,omitempty"`
}

// TraceMember is one cluster replica's part in a trace answer.
type TraceMember struct {
	Name    string `json:"name"`
	Address string `json:"address"`
	// Outcome is "ok" (it answered; its spans are included), "error" (it
	// answered with an error, in Error) or "unreachable" (no answer).
	Outcome string `json:"outcome"`
	Error   string `json:"error,omitempty"`
}

// Package tracestore reads, indexes, renders and forwards the spans that
// hostd's embedded file exporter (host/telemetry.FileExporter) writes to
// <data dir>/traces/*.jsonl.
//
// The files hold one OTLP-JSON TracesData per line, trace and span ids in
// hex — the OpenTelemetry Collector file-exporter format — so any OTLP tool
// reads them too. This package is what `hostd trace show|ls|push` is built
// on; it reads the files directly and therefore works on the data directory
// of a stopped daemon as well as of a running one (the exporter only appends
// whole lines).
//
// # Use
//
//	st, err := tracestore.LoadDataDir("./hostd-data")
//	ids, err := st.Lookup("42")            // a broadcast id or a trace id
//	tracestore.Render(os.Stdout, st, ids[0], tracestore.RenderOptions{})
//	td := st.OTLP(ids...)                  // for --json or Push
//
// # Damaged input
//
// A daemon killed with SIGKILL can leave the last line of spans.jsonl cut
// short. Loading never fails and never panics because of file contents: a
// torn last line (no trailing newline, not decodable) counts in
// Stats.Torn, any other undecodable line in Stats.Corrupt, each with a
// Warning naming file and line. Spans repeated across files (a span id seen
// twice in one trace) are kept once.
//
// # Rendering
//
// Render draws one trace as a tree with a waterfall: offset from the trace
// start, duration, a bar, the span name and kind, the attempt counter
// (hostd.attempt), hostd.recovered, the status and error message, then the
// span's attributes, events and links. Spans whose parent is not in the
// files (it had not ended when the process died, or it lives in another
// service) hang under a synthetic "(parent not exported)" node; a parent
// that came from another process over W3C traceparent is marked remote.
//
// # Forwarding
//
// Push posts spans to an OTLP/HTTP collector's /v1/traces as binary
// protobuf in batches, so a backend adopted later (Jaeger, Tempo, the
// Collector) can import what hostd recorded.
package tracestore

// Package telemetry builds hostd's OpenTelemetry providers and its logger
// from configuration. It is the only package of hostd that imports the OTel
// SDK and exporters; everything else uses the OTel API and receives the
// providers it needs (never the global providers, which are left
// untouched). The one global New sets is the SDK's error handler and
// internal logger: export failures go to hostd's slog logger at ERROR, not
// to Go's log package.
//
//   - Traces: a TracerProvider with a parent-based sampler (always on for
//     roots by default), resource service.name, service.version and a
//     service.instance.id fresh on every start, and the exporter named by
//     telemetry.traces.exporter. Exporters are constructors in the
//     traceExporters map (exporters.go); a new exporter is one more entry
//     (see file*.go for the embedded file exporter). Both OTLP exporters
//     take telemetry.traces.endpoint as a URL or host:port, parsed by
//     config.ParseOTLPEndpoint like `hostd trace push` (a URL without a
//     path posts to /v1/traces).
//   - Metrics: a MeterProvider whose reader is the OTel Prometheus exporter
//     on a private registry (plus Go runtime and process collectors),
//     served by Providers.Metrics at /metrics.
//   - Logs: log/slog, text or JSON (NewLogger).
package telemetry

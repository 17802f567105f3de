package config

import "time"

// Telemetry configures OpenTelemetry traces and metrics.
type Telemetry struct {
	// ServiceName is the service.name resource attribute. Default "hostd".
	ServiceName string `koanf:"service_name"`
	// Traces configures span export.
	Traces Traces `koanf:"traces"`
	// Metrics configures metric export.
	Metrics Metrics `koanf:"metrics"`
}

// Traces configures the trace exporter and sampler.
type Traces struct {
	// Exporter is one of TraceExporters. Default "file": OTLP-JSON lines in
	// <data dir>/traces, read by `hostd trace` (docs/tracing.md).
	Exporter string `koanf:"exporter"`
	// File configures the "file" exporter's rotation.
	File TraceFile `koanf:"file"`
	// Endpoint is the OTLP collector, for both OTLP exporters either a URL
	// (http://collector:4318; the scheme decides TLS; otlp-http posts to
	// the URL's path, /v1/traces when it has none) or host:port (TLS unless
	// insecure; otlp-http posts to /v1/traces). Empty uses the exporter's
	// default (localhost:4317 for otlp-grpc, localhost:4318 for
	// otlp-http). `hostd trace push --endpoint` parses it the same way
	// (ParseOTLPEndpoint).
	Endpoint string `koanf:"endpoint"`
	// Headers are sent with every OTLP export (e.g. an API key).
	Headers map[string]string `koanf:"headers"`
	// Insecure disables TLS to the OTLP endpoint. Default false.
	Insecure bool `koanf:"insecure"`
	// Timeout bounds one export. Default 10s.
	Timeout time.Duration `koanf:"timeout"`
	// Sampler decides for root spans (spans with a remote or local parent
	// follow the parent's decision): always_on, always_off or ratio.
	// Default "always_on".
	Sampler string `koanf:"sampler"`
	// SamplerRatio is the share of root traces sampled when Sampler is
	// "ratio", in [0, 1]. Default 1.
	SamplerRatio float64 `koanf:"sampler_ratio"`
}

// TraceFile configures the embedded file exporter's size-based rotation.
type TraceFile struct {
	// MaxSize is the size at which traces/spans.jsonl is rotated.
	// Default 64MiB.
	MaxSize ByteSize `koanf:"max_size"`
	// MaxFiles is how many span files are kept, the current one included.
	// Default 5.
	MaxFiles int `koanf:"max_files"`
}

// Metrics configures metric export.
type Metrics struct {
	// Prometheus serves metrics at /metrics in Prometheus text format.
	// Default true.
	Prometheus bool `koanf:"prometheus"`
}

// TraceExporters lists the accepted values of telemetry.traces.exporter.
// host/telemetry has a constructor for each.
var TraceExporters = []string{"file", "none", "otlp-grpc", "otlp-http"}

func defaultTelemetry() Telemetry {
	return Telemetry{
		ServiceName: "hostd",
		Traces: Traces{
			Exporter:     "file",
			File:         TraceFile{MaxSize: 64 << 20, MaxFiles: 5},
			Timeout:      10 * time.Second,
			Sampler:      "always_on",
			SamplerRatio: 1,
		},
		Metrics: Metrics{Prometheus: true},
	}
}

func (t *Telemetry) validate(p *problems) {
	if t.ServiceName == "" {
		p.addOnce("telemetry.service_name", "required")
	}
	p.oneOf("telemetry.traces.exporter", t.Traces.Exporter, TraceExporters...)
	positive(p, "telemetry.traces.timeout", t.Traces.Timeout)
	t.Traces.validateOTLPEndpoint(p)
	if t.Traces.File.MaxSize < 4<<10 {
		p.addOnce("telemetry.traces.file.max_size", "must be at least 4KiB, got %d bytes", t.Traces.File.MaxSize)
	}
	if t.Traces.File.MaxFiles < 1 || t.Traces.File.MaxFiles > 1000 {
		p.addOnce("telemetry.traces.file.max_files", "must be in 1..1000, got %d", t.Traces.File.MaxFiles)
	}
	p.oneOf("telemetry.traces.sampler", t.Traces.Sampler, "always_on", "always_off", "ratio")
	if t.Traces.SamplerRatio < 0 || t.Traces.SamplerRatio > 1 {
		p.addOnce("telemetry.traces.sampler_ratio", "must be in [0, 1], got %v", t.Traces.SamplerRatio)
	}
}

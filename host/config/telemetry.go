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
	// Exporter is one of TraceExporters. Default "none".
	Exporter string `koanf:"exporter"`
	// Endpoint is the OTLP collector: host:port for otlp-grpc (default
	// localhost:4317), host:port or URL for otlp-http (default
	// localhost:4318). Empty uses the exporter's default.
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

// Metrics configures metric export.
type Metrics struct {
	// Prometheus serves metrics at /metrics in Prometheus text format.
	// Default true.
	Prometheus bool `koanf:"prometheus"`
}

// TraceExporters lists the accepted values of telemetry.traces.exporter.
// host/telemetry has a constructor for each.
var TraceExporters = []string{"none", "otlp-grpc", "otlp-http"}

func defaultTelemetry() Telemetry {
	return Telemetry{
		ServiceName: "hostd",
		Traces: Traces{
			Exporter:     "none",
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
	p.oneOf("telemetry.traces.sampler", t.Traces.Sampler, "always_on", "always_off", "ratio")
	if t.Traces.SamplerRatio < 0 || t.Traces.SamplerRatio > 1 {
		p.addOnce("telemetry.traces.sampler_ratio", "must be in [0, 1], got %v", t.Traces.SamplerRatio)
	}
}

package telemetry

import (
	"context"
	"log/slog"
	"sort"

	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/hostd-dev/hostd/host/config"
)

// ExporterEnv is what a trace exporter may need besides its config.
type ExporterEnv struct {
	// DataDir is hostd's data directory ("" when in memory).
	DataDir string
	// Logger receives exporter errors.
	Logger *slog.Logger
	// Resource describes this process.
	Resource *resource.Resource
}

// ExporterFactory builds the span processor (with its exporter) for one
// value of telemetry.traces.exporter. A nil processor means "export
// nothing". Remote exporters batch; an exporter that must not lose ended
// spans on a crash uses a simple (synchronous) processor.
type ExporterFactory func(ctx context.Context, cfg config.Traces, env ExporterEnv) (sdktrace.SpanProcessor, error)

// traceExporters maps telemetry.traces.exporter values to constructors.
// Keep it in step with config.TraceExporters. Another file may add an entry
// in its init function.
var traceExporters = map[string]ExporterFactory{
	"none":      func(context.Context, config.Traces, ExporterEnv) (sdktrace.SpanProcessor, error) { return nil, nil },
	"otlp-grpc": newOTLPGRPC,
	"otlp-http": newOTLPHTTP,
}

// ExporterNames lists the known trace exporters.
func ExporterNames() []string {
	var out []string
	for n := range traceExporters {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

func newOTLPGRPC(ctx context.Context, cfg config.Traces, _ ExporterEnv) (sdktrace.SpanProcessor, error) {
	var opts []otlptracegrpc.Option
	insecure := cfg.Insecure
	if cfg.Endpoint != "" {
		e, err := config.ParseOTLPEndpoint(cfg.Endpoint)
		if err != nil {
			return nil, err
		}
		opts = append(opts, otlptracegrpc.WithEndpoint(e.HostPort))
		insecure = e.Insecure(cfg.Insecure)
	}
	if insecure {
		opts = append(opts, otlptracegrpc.WithInsecure())
	}
	if len(cfg.Headers) > 0 {
		opts = append(opts, otlptracegrpc.WithHeaders(cfg.Headers))
	}
	if cfg.Timeout > 0 {
		opts = append(opts, otlptracegrpc.WithTimeout(cfg.Timeout))
	}
	exp, err := otlptracegrpc.New(ctx, opts...)
	if err != nil {
		return nil, err
	}
	return sdktrace.NewBatchSpanProcessor(exp), nil
}

// newOTLPHTTP posts to the endpoint's path: a URL without one (the way
// users write it, http://collector:4318) gets /v1/traces, as `hostd trace
// push` does; the SDK's own URL option would post to "/".
func newOTLPHTTP(ctx context.Context, cfg config.Traces, _ ExporterEnv) (sdktrace.SpanProcessor, error) {
	var opts []otlptracehttp.Option
	insecure := cfg.Insecure
	if cfg.Endpoint != "" {
		e, err := config.ParseOTLPEndpoint(cfg.Endpoint)
		if err != nil {
			return nil, err
		}
		opts = append(opts, otlptracehttp.WithEndpoint(e.HostPort), otlptracehttp.WithURLPath(e.Path))
		insecure = e.Insecure(cfg.Insecure)
	}
	if insecure {
		opts = append(opts, otlptracehttp.WithInsecure())
	}
	if len(cfg.Headers) > 0 {
		opts = append(opts, otlptracehttp.WithHeaders(cfg.Headers))
	}
	if cfg.Timeout > 0 {
		opts = append(opts, otlptracehttp.WithTimeout(cfg.Timeout))
	}
	exp, err := otlptracehttp.New(ctx, opts...)
	if err != nil {
		return nil, err
	}
	return sdktrace.NewBatchSpanProcessor(exp), nil
}

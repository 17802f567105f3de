package telemetry

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	"go.opentelemetry.io/otel/metric"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	tracenoop "go.opentelemetry.io/otel/trace/noop"

	"github.com/hostd-dev/hostd/host/config"
)

// Options are what New needs besides the telemetry config.
type Options struct {
	// ServiceVersion is the service.version resource attribute.
	ServiceVersion string
	// DataDir is the data directory (for exporters that write files);
	// empty with an in-memory catalog.
	DataDir string
	// Logger receives exporter errors. Default: discard.
	Logger *slog.Logger
	// DeferTraces leaves TracerProvider a no-op until StartTraces is
	// called. The Host uses it to create exporters that write into the
	// data directory only after the catalog holds the directory's lock, so
	// a second hostd on the same directory never touches its files.
	DeferTraces bool
}

// Providers are the telemetry of one hostd start. Close them with Shutdown.
type Providers struct {
	// TracerProvider makes spans; pass it to every component.
	TracerProvider trace.TracerProvider
	// MeterProvider makes instruments; pass it to every component.
	MeterProvider metric.MeterProvider
	// Metrics serves the Prometheus text format (nil when disabled).
	Metrics http.Handler
	// InstanceID is this start's service.instance.id.
	InstanceID string
	// Resource describes this process (service.name, instance id, ...).
	Resource *resource.Resource

	shutdown []func(context.Context) error
	traces   config.Traces
	env      ExporterEnv
}

// New builds the providers described by cfg.
func New(ctx context.Context, cfg config.Telemetry, opts Options) (*Providers, error) {
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	id, err := newInstanceID()
	if err != nil {
		return nil, err
	}
	attrs := []attribute.KeyValue{
		attribute.String("service.name", cfg.ServiceName),
		attribute.String("service.instance.id", id),
	}
	if opts.ServiceVersion != "" {
		attrs = append(attrs, attribute.String("service.version", opts.ServiceVersion))
	}
	routeOTelErrors(opts.Logger)
	res := resource.NewSchemaless(attrs...)
	p := &Providers{InstanceID: id, Resource: res, traces: cfg.Traces,
		env: ExporterEnv{DataDir: opts.DataDir, Logger: opts.Logger, Resource: res}}
	p.TracerProvider = tracenoop.NewTracerProvider()
	if !opts.DeferTraces {
		if err := p.StartTraces(ctx); err != nil {
			return nil, err
		}
	}

	if cfg.Metrics.Prometheus {
		reg := prometheus.NewRegistry()
		reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
		exp, err := otelprom.New(otelprom.WithRegisterer(reg))
		if err != nil {
			_ = p.Shutdown(ctx)
			return nil, fmt.Errorf("telemetry: prometheus exporter: %w", err)
		}
		mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(exp), sdkmetric.WithResource(res))
		p.MeterProvider = mp
		p.shutdown = append(p.shutdown, mp.Shutdown)
		p.Metrics = promhttp.HandlerFor(reg, promhttp.HandlerOpts{
			ErrorLog: slog.NewLogLogger(opts.Logger.Handler(), slog.LevelWarn),
		})
	} else {
		p.MeterProvider = metricnoop.NewMeterProvider()
	}
	return p, nil
}

// StartTraces builds the TracerProvider and its exporter (New does it
// unless Options.DeferTraces). Call it once, before handing the provider to
// components.
func (p *Providers) StartTraces(ctx context.Context) error {
	if _, ok := p.TracerProvider.(*sdktrace.TracerProvider); ok {
		return errors.New("telemetry: traces already started")
	}
	tp, err := newTracerProvider(ctx, p.traces, p.Resource, p.env)
	if err != nil {
		return err
	}
	p.TracerProvider = tp
	p.shutdown = append(p.shutdown, tp.Shutdown)
	return nil
}

// Shutdown flushes and stops the providers (last spans are exported).
func (p *Providers) Shutdown(ctx context.Context) error {
	var errs []error
	for i := len(p.shutdown) - 1; i >= 0; i-- {
		if err := p.shutdown[i](ctx); err != nil {
			errs = append(errs, err)
		}
	}
	p.shutdown = nil
	return errors.Join(errs...)
}

func newTracerProvider(ctx context.Context, cfg config.Traces, res *resource.Resource, env ExporterEnv) (*sdktrace.TracerProvider, error) {
	var root sdktrace.Sampler
	switch cfg.Sampler {
	case "always_on", "":
		root = sdktrace.AlwaysSample()
	case "always_off":
		root = sdktrace.NeverSample()
	case "ratio":
		root = sdktrace.TraceIDRatioBased(cfg.SamplerRatio)
	default:
		return nil, fmt.Errorf("telemetry: unknown sampler %q", cfg.Sampler)
	}
	opts := []sdktrace.TracerProviderOption{
		sdktrace.WithResource(res),
		sdktrace.WithSampler(sdktrace.ParentBased(root)),
	}
	f, ok := traceExporters[cfg.Exporter]
	if !ok {
		return nil, fmt.Errorf("telemetry: unknown trace exporter %q (known: %s)", cfg.Exporter, strings.Join(ExporterNames(), ", "))
	}
	sp, err := f(ctx, cfg, env)
	if err != nil {
		return nil, fmt.Errorf("telemetry: trace exporter %s: %w", cfg.Exporter, err)
	}
	if sp != nil {
		opts = append(opts, sdktrace.WithSpanProcessor(sp))
	}
	return sdktrace.NewTracerProvider(opts...), nil
}

func newInstanceID() (string, error) {
	var b [8]byte
	if _, err := io.ReadFull(rand.Reader, b[:]); err != nil {
		return "", fmt.Errorf("telemetry: instance id: %w", err)
	}
	return hex.EncodeToString(b[:]), nil
}

// routeOTelErrors sends what the OTel SDK reports on its own — a failed
// export, a dropped span — to hostd's structured log instead of Go's log
// package (the SDK's default). The SDK's handler is process-wide: the last
// New wins, which is the running hostd.
func routeOTelErrors(log *slog.Logger) {
	otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) {
		log.Error("opentelemetry: export or SDK error", "err", err)
	}))
	otel.SetLogger(logr.FromSlogHandler(log.With("component", "opentelemetry").Handler()))
}

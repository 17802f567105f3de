package telemetry

import (
	"context"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/hostd-dev/hostd/host/config"
)

func init() { traceExporters["file"] = newFileProcessor }

// newFileProcessor is the "file" exporter (the default): the FileExporter
// behind a FileSpanProcessor (synchronous, no batching), so that each span
// is on disk when End returns and a SIGKILL loses only spans that had not ended
// (tracing.md). Without a data directory (in-memory catalog) there is
// nowhere to write: it exports nothing and says so in the log.
func newFileProcessor(_ context.Context, cfg config.Traces, env ExporterEnv) (sdktrace.SpanProcessor, error) {
	if env.DataDir == "" {
		if env.Logger != nil {
			env.Logger.Warn("telemetry: trace exporter \"file\" has no data directory (in-memory catalog); spans are not exported")
		}
		return nil, nil
	}
	exp, err := NewFileExporter(FileExporterConfig{
		Dir:      TraceDir(env.DataDir),
		MaxSize:  int64(cfg.File.MaxSize),
		MaxFiles: cfg.File.MaxFiles,
	})
	if err != nil {
		return nil, err
	}
	var onError func(error)
	if env.Logger != nil {
		onError = func(err error) { env.Logger.Warn("telemetry: writing spans failed", "err", err) }
	}
	return NewFileSpanProcessor(exp, onError), nil
}

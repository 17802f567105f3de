package telemetry

import (
	"fmt"
	"io"
	"log/slog"

	"github.com/hostd-dev/hostd/host/config"
)

// NewLogger returns a slog.Logger writing cfg.Format (text or json) at
// cfg.Level and above to w.
func NewLogger(cfg config.Log, w io.Writer) (*slog.Logger, error) {
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(cfg.Level)); err != nil {
		return nil, fmt.Errorf("telemetry: log level %q: %w", cfg.Level, err)
	}
	ho := &slog.HandlerOptions{Level: lvl}
	switch cfg.Format {
	case "json":
		return slog.New(slog.NewJSONHandler(w, ho)), nil
	case "text", "":
		return slog.New(slog.NewTextHandler(w, ho)), nil
	}
	return nil, fmt.Errorf("telemetry: log format %q: want text or json", cfg.Format)
}

package config

// Log configures structured logging (log/slog) to stderr.
type Log struct {
	// Level is debug, info, warn or error. Default "info".
	Level string `koanf:"level"`
	// Format is text or json. Default "text".
	Format string `koanf:"format"`
}

func defaultLog() Log { return Log{Level: "info", Format: "text"} }

func (l *Log) validate(p *problems) {
	p.oneOf("log.level", l.Level, "debug", "info", "warn", "error")
	p.oneOf("log.format", l.Format, "text", "json")
}

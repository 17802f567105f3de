package config

import (
	"fmt"
	"sort"
	"strings"
)

// Config is the whole configuration of a hostd daemon. Build one with Default
// or Load; never use the zero value.
type Config struct {
	// API is the HTTP API server: listen address, TLS, tokens, limits.
	API API `koanf:"api"`
	// Data is the embedded catalog's data directory and durability.
	Data Data `koanf:"data"`
	// Log is structured logging.
	Log Log `koanf:"log"`
	// Telemetry is OpenTelemetry tracing and metrics.
	Telemetry Telemetry `koanf:"telemetry"`
	// Plugins is the Wasm plugin runtime.
	Plugins Plugins `koanf:"plugins"`
	// Broadcast is the atomic broadcast engine.
	Broadcast Broadcast `koanf:"broadcast"`
	// Locks is resource-key and lease locks.
	Locks Locks `koanf:"locks"`
	// Mapping is static topics and logic queues.
	Mapping Mapping `koanf:"mapping"`
	// Catalog selects the durable store: embedded Badger or etcd.
	Catalog Catalog `koanf:"catalog"`
	// Cluster is this replica's identity in cluster mode (etcd catalog).
	Cluster Cluster `koanf:"cluster"`
	// WAL selects where physical queues live: the catalog or JetStream.
	WAL WAL `koanf:"wal"`
}

// Default returns the configuration used when nothing is set.
func Default() Config {
	return Config{
		API:       defaultAPI(),
		Data:      defaultData(),
		Log:       defaultLog(),
		Telemetry: defaultTelemetry(),
		Plugins:   defaultPlugins(),
		Broadcast: defaultBroadcast(),
		Locks:     defaultLocks(),
		Mapping:   defaultMapping(),
		Catalog:   defaultCatalog(),
		Cluster:   defaultCluster(),
		WAL:       defaultWAL(),
	}
}

// Validate reports every problem of c at once as a *ValidationError, or nil.
func (c *Config) Validate() error {
	var p problems
	c.validate(&p)
	return p.err()
}

func (c *Config) validate(p *problems) {
	c.API.validate(p)
	c.Data.validate(p)
	c.Log.validate(p)
	c.Telemetry.validate(p)
	c.Plugins.validate(p)
	c.Broadcast.validate(p)
	c.Locks.validate(p)
	c.Mapping.validate(p)
	c.Catalog.validate(p)
	c.validateCluster(p)
	c.WAL.validate(p)
}

// Problem is one configuration mistake.
type Problem struct {
	// Key is the key path, e.g. "api.listen" or "api.tokens[1].role". For a
	// file that cannot be parsed it is the file name.
	Key string `json:"key"`
	// Message says what is wrong and what is expected.
	Message string `json:"message"`
}

func (p Problem) String() string { return p.Key + ": " + p.Message }

// ValidationError lists every problem found in a configuration.
type ValidationError struct {
	Problems []Problem
}

func (e *ValidationError) Error() string {
	var b strings.Builder
	n := len(e.Problems)
	if n == 1 {
		b.WriteString("config: 1 problem:")
	} else {
		fmt.Fprintf(&b, "config: %d problems:", n)
	}
	for _, p := range e.Problems {
		b.WriteString("\n  ")
		b.WriteString(p.String())
	}
	return b.String()
}

// problems collects Problems; sections report through it.
type problems struct {
	list []Problem
	seen map[string]bool // keys that already have a (decode) problem
}

// add records a problem at key.
func (p *problems) add(key, format string, args ...any) {
	p.list = append(p.list, Problem{Key: key, Message: fmt.Sprintf(format, args...)})
}

// addOnce records a problem unless key already has one (decode errors come
// first; validating the half-decoded value again would only repeat them).
func (p *problems) addOnce(key, format string, args ...any) {
	if p.seen[key] {
		return
	}
	p.add(key, format, args...)
}

func (p *problems) mark(key string) {
	if p.seen == nil {
		p.seen = map[string]bool{}
	}
	p.seen[key] = true
}

func (p *problems) err() error {
	if len(p.list) == 0 {
		return nil
	}
	out := make([]Problem, len(p.list))
	copy(out, p.list)
	sort.SliceStable(out, func(i, j int) bool { return out[i].Key < out[j].Key })
	return &ValidationError{Problems: out}
}

// oneOf reports a problem if v is not one of allowed.
func (p *problems) oneOf(key, v string, allowed ...string) {
	for _, a := range allowed {
		if v == a {
			return
		}
	}
	p.addOnce(key, "must be one of %s, got %q", strings.Join(allowed, ", "), v)
}

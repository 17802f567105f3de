package wasm

import (
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"runtime"
	"time"

	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/hostd-dev/hostd/runtime/catalog"
	"github.com/hostd-dev/hostd/runtime/sched"
)

// Limits are the per-plugin resource limits. Zero fields take the
// runtime's defaults (Config.Defaults), whose zero fields take the
// documented defaults.
type Limits struct {
	// CallTimeout bounds one handler call. Default 5s.
	CallTimeout time.Duration
	// MemoryLimit is the most linear memory one instance may use, in
	// bytes (rounded down to 64 KiB pages; a Go guest needs at least 35
	// pages, 2240 KiB). Tables get a budget of a quarter of it besides
	// (8 bytes an element; tables.go). Default 64 MiB.
	MemoryLimit uint64
	// PoolSize is the number of warm instances. Default GOMAXPROCS.
	PoolSize int
	// KVMaxKeys is the most keys the plugin may keep in its KV. Default
	// 100000.
	KVMaxKeys int64
	// KVMaxBytes is the most key+value bytes the plugin may keep in its
	// KV. Default 64 MiB.
	KVMaxBytes int64
	// MaxOutput is the largest handler output (set_output) accepted.
	// Default 1 MiB.
	MaxOutput int
	// MaxLogBytes caps what one call may write to stdout/stderr and the
	// log function; the excess is dropped with a note. Default 64 KiB.
	MaxLogBytes int
	// InitTimeout bounds the start of one instance: instantiation, the
	// module's start function and _initialize. A plugin that does not
	// start within it fails to load with an error wrapping
	// ErrInitTimeout. Default 10s.
	InitTimeout time.Duration
	// Interrupt chooses how a call timeout stops the guest: "" or "auto"
	// (default: rewrite the module to check an interrupt counter at
	// function entries, loop headers and bulk instructions; a module that
	// cannot be rewritten is refused at load) or "close-on-context-done"
	// (the operator's opt-in for such a module: never rewrite; wazero then
	// exits to Go at every loop iteration, which makes guest loops many
	// times slower, and cannot stop loop-free recursion). Invalid modules
	// are refused either way. See docs/plugin-abi.md, "Timeouts".
	Interrupt string
}

// Interrupt settings (Limits.Interrupt).
const (
	InterruptAuto           = "auto"
	InterruptCloseOnContext = "close-on-context-done"
)

func (l Limits) withDefaults(d Limits) Limits {
	if l.CallTimeout == 0 {
		l.CallTimeout = d.CallTimeout
	}
	if l.MemoryLimit == 0 {
		l.MemoryLimit = d.MemoryLimit
	}
	if l.PoolSize == 0 {
		l.PoolSize = d.PoolSize
	}
	if l.KVMaxKeys == 0 {
		l.KVMaxKeys = d.KVMaxKeys
	}
	if l.KVMaxBytes == 0 {
		l.KVMaxBytes = d.KVMaxBytes
	}
	if l.MaxOutput == 0 {
		l.MaxOutput = d.MaxOutput
	}
	if l.MaxLogBytes == 0 {
		l.MaxLogBytes = d.MaxLogBytes
	}
	if l.Interrupt == "" {
		l.Interrupt = d.Interrupt
	}
	if l.InitTimeout == 0 {
		l.InitTimeout = d.InitTimeout
	}
	return l
}

// DefaultLimits returns the documented defaults.
func DefaultLimits() Limits {
	return Limits{
		CallTimeout: 5 * time.Second,
		InitTimeout: 10 * time.Second,
		MemoryLimit: 64 << 20,
		PoolSize:    runtime.GOMAXPROCS(0),
		KVMaxKeys:   100000,
		KVMaxBytes:  64 << 20,
		MaxOutput:   1 << 20,
		MaxLogBytes: 64 << 10,
	}
}

func (l Limits) validate(path string, errs *[]error) {
	add := func(f string, a ...any) { *errs = append(*errs, fmt.Errorf(path+": "+f, a...)) }
	if l.CallTimeout < 0 {
		add("call_timeout must be > 0, got %s", l.CallTimeout)
	}
	if l.InitTimeout < 0 || l.InitTimeout > 10*time.Minute {
		add("init_timeout must be between 0 (default 10s) and 10m, got %s", l.InitTimeout)
	}
	if l.MemoryLimit != 0 && (l.MemoryLimit < 65536 || l.MemoryLimit > 4<<30) {
		add("memory_limit must be between 64KiB (one page; a Go guest needs 35 pages, 2240KiB) and 4GiB, got %d", l.MemoryLimit)
	}
	if l.PoolSize < 0 || l.PoolSize > 1024 {
		add("pool_size must be 0..1024 (0 = default), got %d", l.PoolSize)
	}
	if l.KVMaxKeys < 0 || l.KVMaxBytes < 0 || l.MaxOutput < 0 || l.MaxLogBytes < 0 {
		add("kv_max_keys, kv_max_bytes, max_output and max_log_bytes must be >= 0")
	}
	if l.Interrupt != "" && l.Interrupt != InterruptAuto && l.Interrupt != InterruptCloseOnContext {
		add("interrupt must be %q or %q, got %q", InterruptAuto, InterruptCloseOnContext, l.Interrupt)
	}
}

// Spec names one plugin explicitly, with its settings.
type Spec struct {
	// Name is the plugin's name (lowercase letters, digits, '-', '_',
	// '.'). Default: the file name without ".wasm".
	Name string
	// Path is the .wasm file. Default: <Config.Dir>/<Name>.wasm.
	Path string
	// Config is handed to the guest (sdk.Config).
	Config map[string]string
	// Limits override Config.Defaults for this plugin.
	Limits Limits
}

// Config configures a Runtime.
type Config struct {
	// Dir is scanned for *.wasm files at load and reload; each is a plugin
	// named after its file (a Spec with the same name adds settings).
	// "" = no directory.
	Dir string
	// Plugins lists plugins explicitly (also ones outside Dir).
	Plugins []Spec
	// CacheDir holds wazero's compilation cache ("" = in memory only).
	// hostd uses <data dir>/wasm-cache.
	CacheDir string
	// Defaults are the limits of plugins that do not set their own.
	Defaults Limits
	// Store backs plugin KV (namespace catalog.NSPluginKV). nil: KV calls
	// fail with "unavailable".
	Store catalog.Store
	// Locks serves the lease-lock host functions (lock_acquire,
	// lock_renew, lock_release, fence_check, kv_put_fenced). nil: they
	// fail with "unavailable".
	Locks Locks
	// InUse reports whether pending work still needs msgType; a reload
	// that would remove such a type is refused. nil = never in use.
	InUse func(msgType string) bool
	// Clock drives backoff (default sched.Real).
	Clock sched.Clock
	// Logger receives guest logs and runtime events (default
	// slog.Default()).
	Logger         *slog.Logger
	TracerProvider trace.TracerProvider
	MeterProvider  metric.MeterProvider
	// BackoffInitial / BackoffMax bound the backoff between attempts to
	// start an instance of a plugin that keeps failing to start.
	// Defaults 100ms / 30s.
	BackoffInitial, BackoffMax time.Duration
}

var nameRE = regexp.MustCompile(`^[a-z0-9][a-z0-9_.-]{0,63}$`)

// ValidName reports whether s is a valid plugin name.
func ValidName(s string) bool { return nameRE.MatchString(s) }

// Validate reports every problem with c at once.
func (c *Config) Validate() error {
	var errs []error
	c.Defaults.validate("plugins", &errs)
	seen := map[string]bool{}
	for i, s := range c.Plugins {
		path := fmt.Sprintf("plugins.list[%d]", i)
		if s.Name == "" && s.Path == "" {
			errs = append(errs, fmt.Errorf("%s: name or path is required", path))
		}
		if s.Name != "" {
			if !ValidName(s.Name) {
				errs = append(errs, fmt.Errorf("%s.name: %q must match %s", path, s.Name, nameRE))
			}
			if seen[s.Name] {
				errs = append(errs, fmt.Errorf("%s.name: %q listed twice", path, s.Name))
			}
			seen[s.Name] = true
		}
		if s.Path == "" && c.Dir == "" {
			errs = append(errs, fmt.Errorf("%s.path: required when plugins.dir is not set", path))
		}
		s.Limits.validate(path, &errs)
	}
	if c.BackoffInitial < 0 || c.BackoffMax < 0 {
		errs = append(errs, errors.New("plugins: backoff durations must be >= 0"))
	}
	if c.BackoffInitial > 0 && c.BackoffMax > 0 && c.BackoffMax < c.BackoffInitial {
		errs = append(errs, fmt.Errorf("plugins: backoff max %s is below backoff initial %s", c.BackoffMax, c.BackoffInitial))
	}
	return errors.Join(errs...)
}

func (c *Config) setDefaults() {
	c.Defaults = c.Defaults.withDefaults(DefaultLimits())
	if c.Clock == nil {
		c.Clock = sched.Real
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.BackoffInitial == 0 {
		c.BackoffInitial = 100 * time.Millisecond
	}
	if c.BackoffMax == 0 {
		c.BackoffMax = 30 * time.Second
	}
}

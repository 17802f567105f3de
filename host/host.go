package host

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"slices"
	"sync"
	"time"

	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/hostd-dev/hostd/builtin/broadcast"
	"github.com/hostd-dev/hostd/builtin/locks"
	"github.com/hostd-dev/hostd/builtin/mapping"
	"github.com/hostd-dev/hostd/host/api"
	"github.com/hostd-dev/hostd/host/config"
	"github.com/hostd-dev/hostd/host/telemetry"
	"github.com/hostd-dev/hostd/runtime/catalog"
	"github.com/hostd-dev/hostd/runtime/sched"
	"github.com/hostd-dev/hostd/runtime/wal"
	"github.com/hostd-dev/hostd/runtime/wal/jswal"
	"github.com/hostd-dev/hostd/runtime/wasm"
)

// features are opened in this order by Open, one line per feature; each
// opener lives in host/<feature>.go. Dependencies come first: an opener may
// use what an earlier one stored on the Host.
var features = []feature{
	{"admin", openAdmin},
	{"locks", openLocks},
	{"jetstream", openJetStream},
	{"mapping", openMapping},
	{"plugins", openPlugins},
	{"broadcast", openBroadcast},
	{"traces", openTraces},
}

type feature struct {
	name string
	open func(ctx context.Context, h *Host) error
}

// Options are the parts of a Host that do not come from the config file.
type Options struct {
	// Version describes the binary (served at /v1/version).
	Version api.VersionInfo
	// LogOutput receives the logs. Default os.Stderr.
	LogOutput io.Writer
	// Logger replaces the logger built from cfg.Log (tests).
	Logger *slog.Logger
	// Clock is the time source of every component. Default sched.Real.
	Clock sched.Clock
	// WrapAPI, if set, wraps the API server's handler (tests: check every
	// exchange against docs/openapi.json).
	WrapAPI func(http.Handler) http.Handler

	// Catalog, if set, is the durable store to use instead of opening the
	// embedded one from cfg.Data (cluster mode: a store bound to one
	// leader term). The Host does not close it.
	Catalog catalog.Store
	// Telemetry, if set, is shared with the caller: the Host neither
	// builds nor shuts down its own (cluster mode: one telemetry for the
	// process across leader terms). Its traces must be started.
	Telemetry *telemetry.Providers
	// Embedded serves the API only through Host.ServeHTTP: Start binds
	// no socket (cluster mode: the replica's front server routes to the
	// term's Host).
	Embedded bool
	// Takeover: the catalog was last written by another process, maybe on
	// another machine (a cluster leader term). Persisted leases then get
	// their full TTL from now, none is dropped on this machine's clock.
	Takeover bool
	// Term is the leader term this Host serves (cluster mode), 0 outside
	// a cluster. With wal.backend jetstream every record carries it and
	// the queues are fenced with it at start, so a deposed leader's late
	// append fails on every queue (docs/jetstream-wal.md).
	Term uint64
	// OnFenced is called once when a JetStream queue turns out to be
	// fenced by a newer term (cluster mode: the replica steps down).
	OnFenced func()
	// NodeName names this process in the records it writes to JetStream
	// (Hostd-Producer). Default: a random id.
	NodeName string
}

// APITokens are cfg's API tokens as the API server takes them (a cluster
// replica's front server uses the same).
func APITokens(cfg *config.Config) ([]api.Token, error) {
	tokens := make([]api.Token, 0, len(cfg.API.Tokens))
	for _, t := range cfg.API.Tokens {
		role, err := api.ParseRole(t.Role)
		if err != nil {
			return nil, err
		}
		exp, err := t.Expiry()
		if err != nil {
			return nil, err
		}
		tokens = append(tokens, api.Token{Name: t.Name, Secret: t.Token, Role: role, ExpiresAt: exp})
	}
	return tokens, nil
}

// Host is one hostd daemon.
type Host struct {
	cfg   *config.Config
	opts  Options
	log   *slog.Logger
	clock sched.Clock
	tel   *telemetry.Providers
	store catalog.Store // the catalog in use: db, or Options.Catalog
	db    *catalog.DB   // the embedded catalog, when this Host opened it
	api   *api.Server

	mu    sync.Mutex
	comps []*component
	gates map[string]int
	state state

	// Feature components, set by their openers (host/<feature>.go) for the
	// features opened after them.

	// wal and resolver: set by host/mapping.go when static topics are
	// wired; otherwise host/broadcast.go opens the WAL with the 1:1
	// resolver. plugins: set by host/plugins.go.
	wal            *wal.WAL
	js             *jswal.Log // wal.backend jetstream (host/wal.go)
	resolver       wal.Resolver
	mapping        *mapping.Mapping // host/mapping.go
	plugins        *wasm.Runtime
	pluginsLoaded  <-chan struct{} // closed when the first plugin load is over
	broadcastTypes []broadcastType // built-ins registered before openBroadcast
	broadcast      *broadcast.Engine
	leases         *locks.Service  // host/locks.go
	presence       *locks.Presence // host/locks.go
}

type state int

const (
	stateOpen state = iota
	stateStarted
	stateStopped
)

type component struct {
	name        string
	start, stop func(ctx context.Context) error
	running     bool // stop is due: start succeeded, or there is no start
}

// Open builds a Host from cfg: logger, telemetry, catalog (taking the data
// directory's lock), features and API. Nothing runs until Start. On error
// everything opened so far is closed again.
func Open(ctx context.Context, cfg *config.Config, opts Options) (_ *Host, err error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if opts.LogOutput == nil {
		opts.LogOutput = os.Stderr
	}
	if opts.Clock == nil {
		opts.Clock = sched.Real
	}
	h := &Host{cfg: cfg, opts: opts, clock: opts.Clock, gates: map[string]int{}}
	h.log = opts.Logger
	if h.log == nil {
		if h.log, err = telemetry.NewLogger(cfg.Log, opts.LogOutput); err != nil {
			return nil, err
		}
	}
	defer func() {
		if err != nil {
			h.stopComponents(context.WithoutCancel(ctx))
			h.closeResources(context.WithoutCancel(ctx))
		}
	}()
	dataDir := ""
	if !cfg.Data.InMemory {
		dataDir = cfg.Data.Dir
	}
	if opts.Telemetry != nil {
		h.tel = opts.Telemetry
	} else if h.tel, err = telemetry.New(ctx, cfg.Telemetry, telemetry.Options{
		ServiceVersion: opts.Version.Version, DataDir: dataDir, Logger: h.log, DeferTraces: true,
	}); err != nil {
		return nil, err
	}
	if opts.Catalog != nil {
		h.store = opts.Catalog
	} else {
		co := catalog.DefaultOptions(cfg.Data.Dir)
		co.InMemory = cfg.Data.InMemory
		co.SyncWrites = cfg.Data.SyncWrites
		co.GCInterval = cfg.Data.GCInterval
		co.GCDiscardRatio = cfg.Data.GCDiscardRatio
		co.Logger = h.log.With("component", "catalog")
		co.MeterProvider = h.tel.MeterProvider
		co.Clock = h.clock
		if h.db, err = catalog.Open(co); err != nil {
			return nil, fmt.Errorf("host: open catalog: %w", err)
		}
		h.store = h.db
	}
	// Trace exporters may write into the data directory: only now that
	// this process holds its lock.
	if opts.Telemetry == nil {
		if err = h.tel.StartTraces(ctx); err != nil {
			return nil, err
		}
	}
	tokens, err := APITokens(cfg)
	if err != nil {
		return nil, err
	}
	h.api, err = api.New(api.Options{
		Listen:            cfg.API.Listen,
		TLSCertFile:       cfg.API.TLS.CertFile,
		TLSKeyFile:        cfg.API.TLS.KeyFile,
		Tokens:            tokens,
		RequestTimeout:    cfg.API.RequestTimeout,
		MaxBodyBytes:      int64(cfg.API.MaxBodyBytes),
		ReadHeaderTimeout: cfg.API.ReadHeaderTimeout,
		IdleTimeout:       cfg.API.IdleTimeout,
		Logger:            h.log.With("component", "api"),
		TracerProvider:    h.tel.TracerProvider,
		MeterProvider:     h.tel.MeterProvider,
		Metrics:           h.tel.Metrics,
		Version:           opts.Version,
		Ready:             h.notReady,
		Clock:             h.clock,
		Wrap:              opts.WrapAPI,
	})
	if err != nil {
		return nil, err
	}
	h.gates["start"] = 1 // closed at the end of Start
	for _, f := range features {
		if err := f.open(ctx, h); err != nil {
			return nil, fmt.Errorf("host: open %s: %w", f.name, err)
		}
	}
	return h, nil
}

// AddComponent registers a part of the daemon with a lifecycle. Start runs
// the components in registration order (start should return once the
// component runs; long recovery continues in the background behind a
// ReadyGate), and Shutdown stops the started ones in reverse order. Either
// function may be nil. A component without start is a resource opened by
// the opener itself: its stop runs on Shutdown even if Start never ran, and
// when a later opener fails. Call it from a feature's opener.
func (h *Host) AddComponent(name string, start, stop func(ctx context.Context) error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.state != stateOpen {
		panic("host: AddComponent(" + name + ") after Start")
	}
	h.comps = append(h.comps, &component{name: name, start: start, stop: stop, running: start == nil})
}

// ReadyGate holds /readyz at 503 until the returned function is called
// (once; later calls do nothing). Use it for recovery of persisted work.
func (h *Host) ReadyGate(name string) (done func()) {
	h.mu.Lock()
	h.gates[name]++
	h.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			h.mu.Lock()
			if h.gates[name]--; h.gates[name] <= 0 {
				delete(h.gates, name)
			}
			h.mu.Unlock()
			h.log.Debug("ready gate passed", "gate", name)
		})
	}
}

// notReady lists the open gates.
func (h *Host) notReady() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make([]string, 0, len(h.gates))
	for g := range h.gates {
		out = append(out, g)
	}
	slices.Sort(out)
	return out
}

// Ready reports whether every ready gate has passed.
func (h *Host) Ready() bool { return len(h.notReady()) == 0 }

// Start binds and serves the API, then starts the components in order
// (/readyz answers 503 with the open gates until Start is done and every
// gate has passed). If one fails, those already started are stopped again
// and the error names the component; Shutdown stops the API.
func (h *Host) Start(ctx context.Context) error {
	h.mu.Lock()
	if h.state != stateOpen {
		h.mu.Unlock()
		return errors.New("host: Start called twice or after Shutdown")
	}
	h.state = stateStarted
	comps := slices.Clone(h.comps)
	h.mu.Unlock()
	// Bind first: a busy port or a bad certificate fails before any
	// component spends time on recovery. Then serve: /healthz answers at
	// once and /readyz says which gates (start, plugins, recovery) it
	// still waits for while the components start; routes of a component
	// not started yet answer unavailable.
	if !h.opts.Embedded {
		if err := h.api.Listen(); err != nil {
			h.stopComponents(context.WithoutCancel(ctx))
			return err
		}
		if err := h.api.Start(); err != nil {
			h.stopComponents(context.WithoutCancel(ctx))
			return err
		}
	}
	for _, c := range comps {
		if c.start != nil {
			if err := c.start(ctx); err != nil {
				h.stopComponents(context.WithoutCancel(ctx))
				return fmt.Errorf("host: start %s: %w", c.name, err)
			}
		}
		h.mu.Lock()
		c.running = true
		h.mu.Unlock()
		h.log.Debug("component started", "component", c.name)
	}
	h.mu.Lock()
	delete(h.gates, "start") // opened in Open: the start itself is done
	h.mu.Unlock()
	if h.opts.Embedded {
		h.log.Info("hostd components started", "instance_id", h.tel.InstanceID, "version", h.opts.Version.Version)
		return nil
	}
	dir := "(in memory)"
	if h.db == nil {
		dir = fmt.Sprintf("(catalog %T)", h.store)
	} else if h.db.Dir() != "" {
		dir = h.db.Dir()
	}
	h.log.Info("hostd started", "addr", h.api.URL(), "data_dir", dir, "instance_id", h.tel.InstanceID,
		"version", h.opts.Version.Version)
	return nil
}

// Shutdown stops accepting requests and waits (until ctx ends) for those in
// flight, stops the components in reverse order, then closes the catalog
// and flushes telemetry. It returns every error that happened.
func (h *Host) Shutdown(ctx context.Context) error {
	h.mu.Lock()
	if h.state == stateStopped {
		h.mu.Unlock()
		return nil
	}
	wasStarted := h.state == stateStarted
	h.state = stateStopped
	h.mu.Unlock()
	var errs []error
	if wasStarted {
		if err := h.api.Shutdown(ctx); err != nil {
			errs = append(errs, fmt.Errorf("host: api shutdown: %w", err))
		}
	}
	errs = append(errs, h.stopComponents(ctx)...)
	errs = append(errs, h.closeResources(ctx)...)
	h.log.Info("hostd stopped")
	return errors.Join(errs...)
}

// stopComponents stops the running components in reverse order.
func (h *Host) stopComponents(ctx context.Context) []error {
	h.mu.Lock()
	var comps []*component
	for _, c := range h.comps {
		if c.running {
			comps = append(comps, c)
			c.running = false
		}
	}
	h.mu.Unlock()
	var errs []error
	for i := len(comps) - 1; i >= 0; i-- {
		c := comps[i]
		if c.stop == nil {
			continue
		}
		if err := c.stop(ctx); err != nil {
			errs = append(errs, fmt.Errorf("host: stop %s: %w", c.name, err))
		}
	}
	return errs
}

func (h *Host) closeResources(ctx context.Context) []error {
	var errs []error
	if h.db != nil {
		if err := h.db.Close(); err != nil {
			errs = append(errs, fmt.Errorf("host: close catalog: %w", err))
		}
	}
	if h.tel != nil && h.opts.Telemetry == nil {
		if err := h.tel.Shutdown(ctx); err != nil {
			errs = append(errs, fmt.Errorf("host: telemetry shutdown: %w", err))
		}
	}
	return errs
}

// Run starts h, waits until ctx is done (or the API server fails), then
// shuts down gracefully within api.shutdown_timeout.
func (h *Host) Run(ctx context.Context) error {
	return RunUntilDone(ctx, h, h.log, h.cfg.API.ShutdownTimeout)
}

// Daemon is what RunUntilDone drives: a Host, or a cluster replica.
type Daemon interface {
	Start(ctx context.Context) error
	Shutdown(ctx context.Context) error
}

// RunUntilDone starts d, waits until ctx is done, then shuts d down
// within timeout (a failed start is shut down at once).
func RunUntilDone(ctx context.Context, d Daemon, log *slog.Logger, timeout time.Duration) error {
	if err := d.Start(ctx); err != nil {
		_ = d.Shutdown(context.WithoutCancel(ctx))
		return err
	}
	<-ctx.Done()
	log.Info("shutting down", "cause", context.Cause(ctx))
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), timeout)
	defer cancel()
	return d.Shutdown(sctx)
}

// Config is the validated configuration (read-only).
func (h *Host) Config() *config.Config { return h.cfg }

// Logger is the daemon's logger; add a "component" attribute.
func (h *Host) Logger() *slog.Logger { return h.log }

// Clock is the time source to pass to components.
func (h *Host) Clock() sched.Clock { return h.clock }

// Catalog is the durable store.
func (h *Host) Catalog() catalog.Store { return h.store }

// ServeHTTP serves the API (the front server of a cluster replica calls it
// for the term's Host, Options.Embedded).
func (h *Host) ServeHTTP(w http.ResponseWriter, r *http.Request) { h.api.ServeHTTP(w, r) }

// NotReady lists the ready gates still closed (empty: ready).
func (h *Host) NotReady() []string { return h.notReady() }

// TracerProvider is the daemon's tracer provider (never the global one).
func (h *Host) TracerProvider() trace.TracerProvider { return h.tel.TracerProvider }

// MeterProvider is the daemon's meter provider (never the global one).
func (h *Host) MeterProvider() metric.MeterProvider { return h.tel.MeterProvider }

// Telemetry is the telemetry of this start (instance id, resource).
func (h *Host) Telemetry() *telemetry.Providers { return h.tel }

// API is the HTTP server; register routes on it from an opener.
func (h *Host) API() *api.Server { return h.api }

// URL is the API's base URL once started (e.g. "http://127.0.0.1:7070").
func (h *Host) URL() string { return h.api.URL() }

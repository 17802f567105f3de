package wasm

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/tetratelabs/wazero"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/trace"
	tracenoop "go.opentelemetry.io/otel/trace/noop"

	"github.com/hostd-dev/hostd/runtime/catalog"
	"github.com/hostd-dev/hostd/sdk/abi"
)

// Runtime runs hostd's Wasm plugins. It is safe for concurrent use.
type Runtime struct {
	cfg    Config
	logger *slog.Logger
	cache  wazero.CompilationCache
	tracer trace.Tracer
	m      metrics

	reloadMu sync.Mutex // one load/reload at a time

	mu       sync.RWMutex
	closed   bool
	versions map[string]*version // by plugin name
	routes   map[regKey]*version
	loadErrs map[string]string // plugin name -> last load error

	logLimits sync.Map // plugin name -> *logLimiter (hostfuncs.go)
}

// New creates a Runtime and loads the configured plugins. A plugin that
// fails to load is reported in the returned error (a join of *LoadError)
// and in List; the others are loaded and the Runtime is usable. Only a bad
// Config or an unusable cache directory return a nil Runtime.
func New(ctx context.Context, cfg Config) (*Runtime, error) {
	r, err := Open(cfg)
	if err != nil {
		return nil, err
	}
	return r, r.Reload(ctx)
}

// Open creates a Runtime without loading any plugin: the first Reload
// loads them (hostd does that in the background, so that the API serves
// while plugins start). Errors: a bad Config or an unusable cache
// directory.
func Open(cfg Config) (*Runtime, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg.setDefaults()
	r := &Runtime{cfg: cfg, logger: cfg.Logger, versions: map[string]*version{}, routes: map[regKey]*version{}, loadErrs: map[string]string{}}
	if cfg.CacheDir != "" {
		c, err := wazero.NewCompilationCacheWithDir(cfg.CacheDir)
		if err != nil {
			return nil, fmt.Errorf("wasm: compilation cache %s: %w", cfg.CacheDir, err)
		}
		r.cache = c
	}
	tp := cfg.TracerProvider
	if tp == nil {
		tp = tracenoop.NewTracerProvider()
	}
	r.tracer = tp.Tracer("github.com/hostd-dev/hostd/runtime/wasm")
	mp := cfg.MeterProvider
	if mp == nil {
		mp = metricnoop.NewMeterProvider()
	}
	r.m = newMetrics(mp.Meter("github.com/hostd-dev/hostd/runtime/wasm"))
	return r, nil
}

// candidate is one plugin file to load.
type candidate struct {
	name, path string
	spec       Spec
}

func (r *Runtime) candidates() ([]candidate, error) {
	byName := map[string]candidate{}
	var order []string
	specs := map[string]Spec{}
	for _, s := range r.cfg.Plugins {
		name := s.Name
		if name == "" {
			name = strings.TrimSuffix(filepath.Base(s.Path), ".wasm")
		}
		specs[name] = s
	}
	if r.cfg.Dir != "" {
		entries, err := os.ReadDir(r.cfg.Dir)
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("wasm: read plugin directory: %w", err)
		}
		for _, e := range entries {
			if e.IsDir() || !strings.HasSuffix(e.Name(), ".wasm") {
				continue
			}
			name := strings.TrimSuffix(e.Name(), ".wasm")
			byName[name] = candidate{name: name, path: filepath.Join(r.cfg.Dir, e.Name()), spec: specs[name]}
			order = append(order, name)
		}
	}
	for name, s := range specs {
		c, ok := byName[name]
		if !ok {
			c = candidate{name: name, path: filepath.Join(r.cfg.Dir, name+".wasm"), spec: s}
			order = append(order, name)
		}
		if s.Path != "" {
			c.path = s.Path
		}
		c.spec = s
		byName[name] = c
	}
	sort.Strings(order)
	out := make([]candidate, 0, len(order))
	for _, n := range order {
		out = append(out, byName[n])
	}
	return out, nil
}

// Precompile compiles every plugin file into the compilation cache
// (Config.CacheDir) without starting any plugin or registering anything:
// a cluster follower calls it at start so that taking over leadership
// does not wait for the compiler (a cold compile takes seconds). Without
// a CacheDir it only validates. Errors are per plugin, joined.
func (r *Runtime) Precompile(ctx context.Context) error {
	cands, err := r.candidates()
	if err != nil {
		return err
	}
	var errs []error
	for _, c := range cands {
		bin, err := os.ReadFile(c.path)
		if err != nil {
			errs = append(errs, fmt.Errorf("plugin %s: %w", c.name, err))
			continue
		}
		p, err := r.prepare(ctx, bin, c.spec)
		if err == nil {
			var wrt wazero.Runtime
			var code wazero.CompiledModule
			if wrt, code, err = r.engine(ctx, p.mode, p.pages, p.run); err == nil {
				_ = code.Close(ctx)
				_ = wrt.Close(ctx)
			}
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("plugin %s: %w", c.name, err))
		}
	}
	return errors.Join(errs...)
}

// Reload (re)loads every plugin from the directory and the list: each new
// or changed file is compiled, validated and started before anything is
// swapped; unchanged files keep their running version. Calls in flight
// finish on the version they started on. A plugin whose new file fails to
// load keeps its old version (the error is returned and shown by List).
// The reload is refused as a whole (ErrInUse, nothing changes) if it would
// remove a message type for which Config.InUse reports pending work.
func (r *Runtime) Reload(ctx context.Context) error {
	r.reloadMu.Lock()
	defer r.reloadMu.Unlock()
	if r.isClosed() {
		return ErrClosed
	}
	cands, err := r.candidates()
	if err != nil {
		return err
	}
	r.mu.RLock()
	old := make(map[string]*version, len(r.versions))
	for k, v := range r.versions {
		old[k] = v
	}
	r.mu.RUnlock()

	var errs []error
	loadErrs := map[string]string{}
	next := map[string]*version{}
	var fresh []*version
	for _, c := range cands {
		v, err := r.loadOne(ctx, c, old[c.name])
		if err != nil {
			le := &LoadError{Plugin: c.name, Path: c.path, Err: err}
			errs = append(errs, le)
			loadErrs[c.name] = le.Error()
			r.logger.Error("plugin failed to load", "plugin", c.name, "path", c.path, "err", err)
			if o := old[c.name]; o != nil {
				next[c.name] = o // keep the running version
			}
			continue
		}
		if v != old[c.name] {
			fresh = append(fresh, v)
		}
		next[c.name] = v
	}
	// Route table; two plugins claiming one (kind, name): the later one (by
	// name) is refused, naming both.
	routes := map[regKey]*version{}
	names := make([]string, 0, len(next))
	for n := range next {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		v := next[n]
		var conflict []string
		for _, rg := range v.regs {
			k := routeKey(rg.Kind, rg.Name)
			if o, ok := routes[k]; ok && o != v {
				conflict = append(conflict, fmt.Sprintf("%s %q is claimed by both plugin %s and plugin %s", what(rg.Kind), rg.Name, o.name, v.name))
			}
		}
		if len(conflict) > 0 {
			le := &LoadError{Plugin: v.name, Path: v.path, Err: fmt.Errorf("%w: %s", ErrInvalidModule, strings.Join(conflict, "; "))}
			errs = append(errs, le)
			loadErrs[v.name] = le.Error()
			delete(next, n)
			continue
		}
		for _, rg := range v.regs {
			routes[routeKey(rg.Kind, rg.Name)] = v
		}
	}
	// Refuse to drop an ack callback that pending work still needs (the
	// type disappearing, or its plugin no longer registering the callback).
	if r.cfg.InUse != nil {
		var gone []string
		for _, v := range old {
			for _, rg := range v.regs {
				if rg.Kind != abi.KindAck || contains(gone, rg.Name) {
					continue
				}
				nv, ok := routes[routeKey(abi.KindAck, rg.Name)]
				if ok {
					if _, still := nv.byKey[regKey{abi.KindAck, rg.Name}]; still {
						continue
					}
				}
				if r.cfg.InUse(rg.Name) {
					gone = append(gone, rg.Name)
				}
			}
		}
		if len(gone) > 0 {
			for _, v := range fresh {
				v.closeNow()
			}
			sort.Strings(gone)
			return fmt.Errorf("%w: reload refused: it would remove the ack callback of message type(s) %s, which pending broadcasts still need", ErrInUse, strings.Join(gone, ", "))
		}
	}
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		for _, v := range fresh {
			v.closeNow()
		}
		return ErrClosed
	}
	prev := r.versions
	r.versions, r.routes, r.loadErrs = next, routes, loadErrs
	r.mu.Unlock()
	for n, v := range prev {
		if next[n] != v {
			v.retire()
		}
	}
	for _, v := range fresh {
		if next[v.name] != v {
			v.closeNow() // refused for a conflict
			continue
		}
		r.logger.Info("plugin loaded", "plugin", v.name, "path", v.path, "sha256", v.sha256, "handlers", len(v.regs), "pool", v.limits.PoolSize, "interrupt", v.interrupt)
		if v.interrupt != modeInstrumented {
			r.logger.Warn("plugin runs with wazero's close-on-context-done: its loops are much slower", "plugin", v.name, "reason", v.interruptWhy)
		}
		r.m.loaded.Add(ctx, 1, metric.WithAttributes(attribute.String("plugin", v.name), attribute.String("interrupt", v.interrupt)))
	}
	return errors.Join(errs...)
}

func contains(s []string, x string) bool {
	for _, y := range s {
		if y == x {
			return true
		}
	}
	return false
}

// routeKey: a message type belongs to one plugin whatever the handler kind;
// policies have their own namespace.
func routeKey(k abi.Kind, name string) regKey {
	if k == abi.KindPolicy {
		return regKey{abi.KindPolicy, name}
	}
	return regKey{abi.KindAck, name}
}

func what(k abi.Kind) string {
	if k == abi.KindPolicy {
		return "policy"
	}
	return "message type"
}

func (r *Runtime) loadOne(ctx context.Context, c candidate, old *version) (*version, error) {
	if !ValidName(c.name) {
		return nil, fmt.Errorf("%w: plugin name %q must match %s", ErrInvalidModule, c.name, nameRE)
	}
	bin, err := os.ReadFile(c.path)
	if err != nil {
		return nil, err
	}
	sum := sha256.Sum256(bin)
	hexSum := hex.EncodeToString(sum[:])
	if old != nil && old.sha256 == hexSum && sameSpec(old, c.spec, r.cfg.Defaults) {
		return old, nil
	}
	start := time.Now()
	v, err := r.compile(ctx, c.name, c.path, hexSum, bin, c.spec)
	if err != nil {
		return nil, err
	}
	r.m.loadTime.Record(ctx, time.Since(start).Seconds(), metric.WithAttributes(attribute.String("plugin", c.name)))
	return v, nil
}

func sameSpec(v *version, s Spec, d Limits) bool {
	if v.limits != s.Limits.withDefaults(d) || len(v.config) != len(s.Config) {
		return false
	}
	for k, x := range s.Config {
		if y, ok := v.config[k]; !ok || x != y {
			return false
		}
	}
	return true
}

func (r *Runtime) isClosed() bool {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.closed
}

// Close stops every plugin; calls in flight fail. Safe to call twice.
func (r *Runtime) Close() error {
	r.reloadMu.Lock()
	defer r.reloadMu.Unlock()
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return nil
	}
	r.closed = true
	vs := r.versions
	r.versions, r.routes = map[string]*version{}, map[regKey]*version{}
	r.mu.Unlock()
	for _, v := range vs {
		v.retire()
	}
	// Retired versions with calls in flight close when the call returns;
	// make sure none outlives Close.
	for _, v := range vs {
		v.closeNow()
	}
	if r.cache != nil {
		return r.cache.Close(context.Background())
	}
	return nil
}

// Handlers says which plugin serves a message type and what it registered.
type Handlers struct {
	Plugin       string
	Ack          bool
	Validate     bool
	ResourceKeys bool
	// Role is the API role broadcasting the type needs: the strongest
	// declared by its registrations, abi.RoleWrite if none declared one.
	Role abi.Role
}

// Lookup returns the handlers registered for msgType.
func (r *Runtime) Lookup(msgType string) (Handlers, bool) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	v, ok := r.routes[regKey{abi.KindAck, msgType}]
	if !ok {
		return Handlers{}, false
	}
	_, a := v.byKey[regKey{abi.KindAck, msgType}]
	_, va := v.byKey[regKey{abi.KindValidator, msgType}]
	_, rk := v.byKey[regKey{abi.KindResourceKeys, msgType}]
	return Handlers{Plugin: v.name, Ack: a, Validate: va, ResourceKeys: rk, Role: v.role(msgType)}, true
}

// role is the role msgType's registrations declare (the strongest;
// abi.RoleWrite if none does).
func (v *version) role(msgType string) abi.Role {
	role := abi.RoleWrite
	for _, rg := range v.regs {
		if rg.Name == msgType && rg.Kind != abi.KindPolicy && rg.Role > role {
			role = rg.Role
		}
	}
	return role
}

// MessageTypes lists the message types served by plugins, sorted.
func (r *Runtime) MessageTypes() []string {
	r.mu.RLock()
	defer r.mu.RUnlock()
	var out []string
	for k := range r.routes {
		if k.kind != abi.KindPolicy {
			out = append(out, k.name)
		}
	}
	sort.Strings(out)
	return out
}

// HasPolicy reports whether a plugin provides the named mapping policy.
func (r *Runtime) HasPolicy(name string) bool {
	r.mu.RLock()
	defer r.mu.RUnlock()
	_, ok := r.routes[regKey{abi.KindPolicy, name}]
	return ok
}

// PolicyPlugin returns the name of the plugin that serves the named
// mapping policy, so callers can name it in errors about its output.
func (r *Runtime) PolicyPlugin(name string) (plugin string, ok bool) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	v, ok := r.routes[regKey{abi.KindPolicy, name}]
	if !ok {
		return "", false
	}
	return v.name, true
}

// lookup finds and pins the version serving (kind, name).
func (r *Runtime) lookup(kind abi.Kind, name string) (*version, int32, error) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	if r.closed {
		return nil, 0, ErrClosed
	}
	v, ok := r.routes[routeKey(kind, name)]
	if !ok {
		return nil, 0, fmt.Errorf("%w: %s %q", ErrNoHandler, kind, name)
	}
	id, ok := v.byKey[regKey{kind, name}]
	if !ok {
		return nil, 0, fmt.Errorf("%w: plugin %s registered no %s for %q", ErrNoHandler, v.name, kind, name)
	}
	v.refs.Add(1)
	return v, id, nil
}

// AckResult is what an ack callback wants committed: its staged KV writes
// and the optimistic conditions of what it read. Commit Checks,
// RangeChecks and Ops in one catalog.Batch with the task's completion; a
// catalog.ErrConflict means a key it read changed: run the callback again.
type AckResult struct {
	Plugin      string
	Checks      []catalog.Check
	RangeChecks []catalog.RangeCheck
	Ops         []catalog.Op
}

// Ack runs the ack callback registered for msg.Type. Nothing is written:
// the result carries the callback's writes and reads for the caller to
// commit. Errors are *PluginError (see IsPermanent) or wrap ErrNoHandler /
// ErrClosed.
func (r *Runtime) Ack(ctx context.Context, msg *abi.Message) (*AckResult, error) {
	var res *AckResult
	err := r.run(ctx, abi.KindAck, msg.Type, func(b []byte) []byte { return abi.AppendMessage(b, msg) },
		func(v *version) *kvSession {
			return newSession(r.cfg.Store, nil, v.ns, true, &v.limits)
		},
		func(v *version, _ []byte, kv *kvSession) error {
			res = kv.result(v.name)
			return nil
		})
	return res, err
}

// Validate runs the validator registered for msg.Type with read-only KV,
// read from snap when given (else from the store). A nil error accepts.
func (r *Runtime) Validate(ctx context.Context, msg *abi.Message, snap catalog.Reader) error {
	return r.run(ctx, abi.KindValidator, msg.Type, func(b []byte) []byte { return abi.AppendMessage(b, msg) },
		func(v *version) *kvSession {
			return newSession(r.cfg.Store, snap, v.ns, false, &v.limits)
		}, nil)
}

// ResourceKeys runs the resource-key function registered for msg.Type.
func (r *Runtime) ResourceKeys(ctx context.Context, msg *abi.Message) ([]abi.ResourceKey, error) {
	var keys []abi.ResourceKey
	err := r.run(ctx, abi.KindResourceKeys, msg.Type, func(b []byte) []byte { return abi.AppendMessage(b, msg) },
		func(v *version) *kvSession {
			return newSession(r.cfg.Store, nil, v.ns, false, &v.limits)
		},
		func(v *version, out []byte, _ *kvSession) error {
			var err error
			keys, err = abi.DecodeResourceKeys(out)
			return err
		})
	return keys, err
}

// Policy runs the named mapping policy. The caller validates the
// assignment it returns.
func (r *Runtime) Policy(ctx context.Context, name string, in *abi.PolicyInput) (abi.PolicyOutput, error) {
	var out abi.PolicyOutput
	err := r.run(ctx, abi.KindPolicy, name, func(b []byte) []byte { return abi.AppendPolicyInput(b, in) },
		func(v *version) *kvSession {
			return newSession(r.cfg.Store, nil, v.ns, false, &v.limits)
		},
		func(v *version, b []byte, _ *kvSession) error {
			var err error
			out, err = abi.DecodePolicyOutput(b)
			return err
		})
	return out, err
}

func (r *Runtime) run(ctx context.Context, kind abi.Kind, name string, input func([]byte) []byte,
	session func(*version) *kvSession, done func(*version, []byte, *kvSession) error) error {
	v, id, err := r.lookup(kind, name)
	if err != nil {
		return err
	}
	defer v.unref()
	attrs := v.metricAttrs(kind)
	// Guest span events/attributes go to the caller's span when it records
	// (the broadcast's `process broadcast` attempt span, tracing.md), else
	// to this call's own span.
	caller := trace.SpanFromContext(ctx)
	ctx, span := r.tracer.Start(ctx, "plugin."+kind.String(), trace.WithAttributes(
		attribute.String("hostd.plugin", v.name), attribute.String("hostd.plugin.handler", kind.String()),
		attribute.String("hostd.message.type", name)))
	defer span.End()
	start := time.Now()
	kv := session(v)
	guestSpan := span
	if caller.IsRecording() {
		guestSpan = caller
	}
	out, err := v.call(ctx, kind, name, id, input, kv, guestSpan)
	if err == nil && done != nil {
		if derr := done(v, out, kv); derr != nil {
			err = &PluginError{Plugin: v.name, Handler: kind.String(), Name: name, Kind: KindBadOutput, Message: derr.Error()}
		}
	}
	v.calls.Add(1)
	r.m.calls.Add(ctx, 1, attrs)
	r.m.latency.Record(ctx, time.Since(start).Seconds(), attrs)
	if err != nil {
		v.failures.Add(1)
		kindAttr := string(KindOf(err))
		r.m.failures.Add(ctx, 1, metric.WithAttributes(attribute.String("plugin", v.name),
			attribute.String("handler", kind.String()), attribute.String("kind", kindAttr)))
		span.RecordError(err)
		span.SetStatus(codes.Error, kindAttr)
		if k := KindOf(err); k != KindRetryable && k != KindPermanent && r.logLimit(v.name) {
			r.logger.Warn("plugin call failed", "plugin", v.name, "handler", kind.String(), "name", name, "err", err)
		}
	}
	return err
}

// Info describes one plugin for operators.
type Info struct {
	Name          string             `json:"name"`
	Path          string             `json:"path"`
	SHA256        string             `json:"sha256,omitempty"`
	ABI           int                `json:"abi"`
	Registrations []RegistrationInfo `json:"registrations"`
	PoolSize      int                `json:"pool_size"`
	Live          int64              `json:"live_instances"`
	// Calls and Failures count this version's handler calls since it was
	// loaded (hostd's start, or the reload that loaded this file); they
	// are kept in memory only.
	Calls         uint64    `json:"calls"`
	Failures      uint64    `json:"failures"`
	StartFailures int64     `json:"start_failures"`
	LoadedAt      time.Time `json:"loaded_at"`
	// Interrupt is how a call timeout stops the plugin's guest:
	// "instrumented" (hostd rewrote the module to check a flag at function
	// entries and loop headers; loops run at full speed) or
	// "close-on-context-done" (the operator chose it, see InterruptReason;
	// wazero then exits to Go at every loop iteration,
	// which makes loop-heavy guests many times slower).
	Interrupt       string `json:"interrupt,omitempty"`
	InterruptReason string `json:"interrupt_reason,omitempty"`
	// Error is the last load error of this plugin ("" if its file loaded);
	// a plugin with an error and no SHA256 is not running.
	Error string `json:"error,omitempty"`
}

// RegistrationInfo is one registered handler.
type RegistrationInfo struct {
	Kind string `json:"kind"`
	Name string `json:"name"`
	// Role is the API role a token needs to broadcast the message type
	// ("write" or "admin"; empty for policies).
	Role string `json:"role,omitempty"`
}

// List describes every plugin, loaded or failed, sorted by name.
func (r *Runtime) List() []Info {
	r.mu.RLock()
	defer r.mu.RUnlock()
	var out []Info
	for _, v := range r.versions {
		in := Info{Name: v.name, Path: v.path, SHA256: v.sha256, ABI: abi.Version, PoolSize: v.limits.PoolSize,
			Live: v.live.Load(), Calls: v.calls.Load(), Failures: v.failures.Load(),
			StartFailures: v.startFailures.Load(), LoadedAt: v.loaded, Error: r.loadErrs[v.name],
			Interrupt: v.interrupt, InterruptReason: v.interruptWhy}
		for _, rg := range v.regs {
			ri := RegistrationInfo{Kind: rg.Kind.String(), Name: rg.Name}
			if rg.Kind != abi.KindPolicy {
				ri.Role = v.role(rg.Name).String()
			}
			in.Registrations = append(in.Registrations, ri)
		}
		out = append(out, in)
	}
	for n, e := range r.loadErrs {
		if _, ok := r.versions[n]; !ok {
			out = append(out, Info{Name: n, Error: e})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// KVGet reads key from plugin's KV (for operators; the plugin need not be
// loaded). ErrNotFound-wrapping catalog.ErrNotFound if absent.
func (r *Runtime) KVGet(ctx context.Context, plugin string, key []byte) ([]byte, catalog.Version, error) {
	if err := r.checkKVArgs(plugin); err != nil {
		return nil, 0, err
	}
	var val []byte
	var ver catalog.Version
	err := r.cfg.Store.View(ctx, func(rd catalog.Reader) error {
		var err error
		val, ver, err = rd.Get(append(NamespacePrefix(plugin), key...))
		return err
	})
	return val, ver, err
}

// KVScan lists up to limit entries of plugin's KV whose key starts with
// prefix and is greater than after; next is the key to pass as after for
// the next page ("" when done).
func (r *Runtime) KVScan(ctx context.Context, plugin string, prefix, after []byte, limit int) (entries []abi.KVPair, next []byte, err error) {
	if err := r.checkKVArgs(plugin); err != nil {
		return nil, nil, err
	}
	if limit <= 0 || limit > 1000 {
		limit = 100
	}
	ns := NamespacePrefix(plugin)
	start := append(append([]byte(nil), ns...), prefix...)
	end := prefixEnd(start)
	if len(after) > 0 {
		if a := append(append(append([]byte(nil), ns...), after...), 0); string(a) > string(start) {
			start = a
		}
	}
	if end != nil && string(start) >= string(end) {
		return nil, nil, nil // after sorts past every key with the prefix
	}
	err = r.cfg.Store.View(ctx, func(rd catalog.Reader) error {
		return rd.Scan(start, end, func(kv catalog.KV) error {
			if len(entries) == limit {
				next = entries[limit-1].Key
				return catalog.ErrStop
			}
			entries = append(entries, abi.KVPair{Key: kv.Key[len(ns):], Value: kv.Value})
			return nil
		})
	})
	return entries, next, err
}

// KVWrite commits one put (or, with del, delete) of key in plugin's KV for
// an operator or a lease holder (host/api), with extra checks (e.g. a
// lease's fence check) in the same catalog batch, and keeps the
// namespace's usage record exact like a callback's commit does (the
// write itself is not held to the plugin's quota: it is not the
// plugin's). Errors: ErrUnknownPlugin when plugin is neither loaded
// (or failed to load: it is configured) nor has any KV; catalog.ErrConflict
// when a check failed or a concurrent write changed the usage: read and
// try again.
func (r *Runtime) KVWrite(ctx context.Context, plugin string, key, value []byte, del bool, checks ...catalog.Check) (catalog.Version, error) {
	if err := r.checkKVArgs(plugin); err != nil {
		return 0, err
	}
	r.mu.RLock()
	_, loaded := r.versions[plugin]
	_, failed := r.loadErrs[plugin]
	r.mu.RUnlock()
	for _, sp := range r.cfg.Plugins {
		failed = failed || sp.Name == plugin
	}
	ns := NamespacePrefix(plugin)
	fk := append(append([]byte(nil), ns...), key...)
	var u usage
	var cur keyState
	err := r.cfg.Store.View(ctx, func(rd catalog.Reader) error {
		var err error
		if u, err = readUsage(rd, ns); err != nil {
			return err
		}
		v, ver, err := rd.Get(fk)
		if err != nil && !errors.Is(err, catalog.ErrNotFound) {
			return err
		}
		cur = keyState{size: -1}
		if ver != 0 {
			cur = keyState{size: len(v), ver: ver}
		}
		return nil
	})
	if err != nil {
		return 0, err
	}
	if !loaded && !failed && u.keys == 0 {
		return 0, fmt.Errorf("%w: %q is not a loaded or configured plugin and has no KV", ErrUnknownPlugin, plugin)
	}
	after := -1
	if !del {
		after = len(value)
	}
	b := &catalog.Batch{Checks: checks, Ops: []catalog.Op{{Key: fk, Value: value, Delete: del}}}
	if dk, db := sizeDelta(string(fk), cur.size, after); dk != 0 || db != 0 {
		uk := usageKey(ns)
		b.Checks = append(b.Checks, catalog.Check{Key: uk, Version: u.ver})
		b.Ops = append(b.Ops, catalog.Op{Key: uk, Value: encodeUsage(u.keys+dk, u.bytes+db)})
	} else {
		b.Checks = append(b.Checks, catalog.Check{Key: fk, Version: cur.ver})
	}
	return r.cfg.Store.Commit(ctx, b)
}

// KVUsage returns the key count and key+value bytes of plugin's KV, the
// figures its quota (Limits.KVMaxKeys, KVMaxBytes) is enforced against.
func (r *Runtime) KVUsage(ctx context.Context, plugin string) (keys, size int64, err error) {
	if err := r.checkKVArgs(plugin); err != nil {
		return 0, 0, err
	}
	var u usage
	err = r.cfg.Store.View(ctx, func(rd catalog.Reader) error {
		u, err = readUsage(rd, NamespacePrefix(plugin))
		return err
	})
	return u.keys, u.bytes, err
}

func (r *Runtime) checkKVArgs(plugin string) error {
	if !ValidName(plugin) {
		return fmt.Errorf("%w: invalid plugin name %q", ErrNotFound, plugin)
	}
	if r.cfg.Store == nil {
		return errUnavailable
	}
	return nil
}

type metrics struct {
	calls    metric.Int64Counter
	failures metric.Int64Counter
	latency  metric.Float64Histogram
	loadTime metric.Float64Histogram
	loaded   metric.Int64Counter
}

func newMetrics(m metric.Meter) metrics {
	var ms metrics
	ms.calls, _ = m.Int64Counter("hostd.plugin.calls", metric.WithDescription("Plugin handler calls."))
	ms.failures, _ = m.Int64Counter("hostd.plugin.failures", metric.WithDescription("Failed plugin handler calls, by error kind."))
	ms.latency, _ = m.Float64Histogram("hostd.plugin.call.duration", metric.WithUnit("s"), metric.WithDescription("Plugin handler call latency."))
	ms.loaded, _ = m.Int64Counter("hostd.plugin.loads", metric.WithDescription("Plugin versions loaded, by interrupt mode (instrumented or close-on-context-done)."))
	ms.loadTime, _ = m.Float64Histogram("hostd.plugin.load.duration", metric.WithUnit("s"), metric.WithDescription("Time to compile, validate and start a plugin version."))
	return ms
}

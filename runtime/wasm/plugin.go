package wasm

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
	"github.com/tetratelabs/wazero/imports/wasi_snapshot_preview1"
	"github.com/tetratelabs/wazero/sys"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/hostd-dev/hostd/runtime/sched"
	"github.com/hostd-dev/hostd/sdk/abi"
)

// Registration is one handler a plugin registered at initialization.
type Registration struct {
	Kind abi.Kind
	Name string
}

type registration struct {
	Kind abi.Kind
	Name string
	Role abi.Role // declared in register's kind argument (hostfuncs.go)
	id   int32
}

// version is one loaded version of a plugin: its own wazero runtime (for
// the per-plugin memory limit), compiled module and instance pool. A reload
// makes a new version; the old one is closed when its last call returns.
type version struct {
	rt     *Runtime
	name   string
	path   string
	sha256 string
	config map[string]string
	limits Limits
	loaded time.Time
	wrt    wazero.Runtime
	code   wazero.CompiledModule
	regs   []registration
	byKey  map[regKey]int32
	ns     []byte

	// interrupt is how a call's end stops the guest: modeInstrumented
	// (the module was rewritten to check a flag, instrument.go) or
	// modeCloseOnDone (wazero's WithCloseOnContextDone, the operator's
	// opt-in); interruptWhy says why.
	interrupt    string
	interruptWhy string

	pool chan *instance // nil entries are free slots to refill

	ctx    context.Context // canceled when the version closes
	cancel context.CancelFunc
	wg     sync.WaitGroup // background refills

	refs      atomic.Int64
	retired   atomic.Bool
	closeOnce sync.Once

	// backoff spaces the attempts to start instances while they keep
	// failing (one per plugin version, shared by its refills).
	backoffMu sync.Mutex
	backoff   *sched.Backoff

	// watchdogs of the live instances (instrumented mode), stopped by
	// closeNow so that calls in flight end at once.
	wdMu     sync.Mutex
	wds      map[*watchdog]struct{}
	wdClosed bool

	attrsOnce sync.Once
	attrs     [abi.KindPolicy + 1]metric.MeasurementOption

	calls, failures atomic.Uint64
	live            atomic.Int64 // instances alive
	startFailures   atomic.Int64 // consecutive instantiation failures
	lastErr         atomic.Pointer[string]
}

type regKey struct {
	kind abi.Kind
	name string
}

// instance is one warm module instance with cached function handles.
type instance struct {
	mod    api.Module
	handle api.Function
	alloc  api.Function
	cs     *callState
	stdout *stdio
	stderr *stdio
	buf    []byte // input encoding buffer
	bufPtr uint32 // guest buffer from hostd_alloc, valid for bufCap bytes
	bufCap uint32
	stack  [3]uint64
	wd     *watchdog // nil in modeCloseOnDone
}

// prepared is a module ready for the engine: validated, tables bounded,
// timeout checks added (or the close-on-context mode chosen).
type prepared struct {
	limits    Limits
	pages     uint32
	mode, why string
	run       []byte
}

// prepare validates bin and rewrites it as spec's limits say.
func (r *Runtime) prepare(ctx context.Context, bin []byte, spec Spec) (prepared, error) {
	p := prepared{limits: spec.Limits.withDefaults(r.cfg.Defaults), mode: modeInstrumented}
	p.pages = uint32(p.limits.MemoryLimit / 65536)
	// Validate the module as it is, with wazero's own decoder and
	// validator, before the rewriter reads it: the rewriter relies on a
	// valid module, and an invalid one that names the state the rewrite
	// adds (the counter global, the loop local) would become valid, and
	// unstoppable, once rewritten.
	if err := r.validate(ctx, p.pages, bin); err != nil {
		return p, err
	}
	// Tables count against the memory budget: bound their maxima.
	run, err := boundTables(bin, tableBudget(p.limits.MemoryLimit))
	if err != nil {
		return p, fmt.Errorf("%w: %w", ErrInvalidModule, err)
	}
	if p.limits.Interrupt == InterruptCloseOnContext {
		p.mode, p.why = modeCloseOnDone, "configured (interrupt: "+InterruptCloseOnContext+")"
	} else if ins, err := instrument(run); err != nil {
		return p, fmt.Errorf("%w: hostd cannot add its timeout checks to this module (%v); "+
			"to run it anyway with wazero's slower per-loop check, set interrupt: %s for this plugin (docs/plugin-abi.md, Timeouts)",
			ErrInvalidModule, err, InterruptCloseOnContext)
	} else {
		run = ins.bin
	}
	p.run = run
	return p, nil
}

// compile compiles and validates the module at path into a new version
// with one instance (registrations are read from it). It does not publish
// the version.
func (r *Runtime) compile(ctx context.Context, name, path, sum string, bin []byte, spec Spec) (*version, error) {
	p, err := r.prepare(ctx, bin, spec)
	if err != nil {
		return nil, err
	}
	limits, mode, why := p.limits, p.mode, p.why
	wrt, code, err := r.engine(ctx, mode, p.pages, p.run)
	if err != nil {
		return nil, err
	}
	ok := false
	defer func() {
		if !ok {
			_ = wrt.Close(context.Background())
		}
	}()
	if err := checkABI(code, wrt.Module(abi.WASIModule)); err != nil {
		return nil, err
	}
	vctx, cancel := context.WithCancel(context.Background())
	v := &version{
		rt: r, name: name, path: path, sha256: sum, config: spec.Config, limits: limits,
		loaded: time.Now(), wrt: wrt, code: code,
		ns: NamespacePrefix(name), ctx: vctx, cancel: cancel,
		pool:      make(chan *instance, limits.PoolSize),
		interrupt: mode, interruptWhy: why,
	}
	v.backoff, err = sched.NewBackoff(sched.BackoffConfig{Initial: r.cfg.BackoffInitial, Max: r.cfg.BackoffMax, Multiplier: 2})
	if err != nil {
		cancel()
		return nil, err
	}
	first, err := v.instantiate(ctx, true)
	if err != nil {
		cancel()
		return nil, err
	}
	v.regs = first.cs.regs
	v.byKey = make(map[regKey]int32, len(v.regs))
	for _, rg := range v.regs {
		v.byKey[regKey{rg.Kind, rg.Name}] = rg.id
	}
	first.cs.regs = nil
	v.pool <- first
	for i := 1; i < limits.PoolSize; i++ {
		inst, err := v.instantiate(ctx, false)
		if err != nil {
			v.closeNow()
			return nil, err
		}
		v.pool <- inst
	}
	ok = true
	return v, nil
}

// Interrupt modes (Info.Interrupt).
const (
	// modeInstrumented: the module was rewritten to check an interrupt
	// flag at function entries and loop headers; guest loops run at full
	// speed.
	modeInstrumented = "instrumented"
	// modeCloseOnDone: the module runs unmodified under wazero's
	// WithCloseOnContextDone, which exits to Go at every loop iteration.
	modeCloseOnDone = "close-on-context-done"
)

// engine makes a wazero runtime for one plugin version (close-on-context-
// done only in modeCloseOnDone) with the host and WASI modules, and
// compiles bin in it.
func (r *Runtime) engine(ctx context.Context, mode string, pages uint32, bin []byte) (wazero.Runtime, wazero.CompiledModule, error) {
	rc := wazero.NewRuntimeConfig().
		WithCloseOnContextDone(mode == modeCloseOnDone).
		WithMemoryLimitPages(pages)
	if r.cache != nil {
		rc = rc.WithCompilationCache(r.cache)
	}
	wrt := wazero.NewRuntimeWithConfig(ctx, rc)
	if _, err := wasi_snapshot_preview1.NewBuilder(wrt).Instantiate(ctx); err != nil {
		_ = wrt.Close(context.Background())
		return nil, nil, err
	}
	if _, err := hostModule(wrt).Instantiate(ctx); err != nil {
		_ = wrt.Close(context.Background())
		return nil, nil, err
	}
	code, err := compileModule(ctx, wrt, bin)
	if err != nil {
		_ = wrt.Close(context.Background())
		return nil, nil, fmt.Errorf("%w: not a valid WebAssembly module: %v", ErrInvalidModule, err)
	}
	return wrt, code, nil
}

// validate compiles bin as it is, which makes wazero decode and validate
// it completely, and discards the result. The compilation cache makes this
// cheap for a module seen before.
func (r *Runtime) validate(ctx context.Context, pages uint32, bin []byte) error {
	rc := wazero.NewRuntimeConfig().WithMemoryLimitPages(pages)
	if r.cache != nil {
		rc = rc.WithCompilationCache(r.cache)
	}
	wrt := wazero.NewRuntimeWithConfig(ctx, rc)
	defer wrt.Close(context.Background())
	code, err := compileModule(ctx, wrt, bin)
	if err != nil {
		return fmt.Errorf("%w: not a valid WebAssembly module: %v", ErrInvalidModule, err)
	}
	return code.Close(context.Background())
}

// compileModule is wrt.CompileModule, but a panic in wazero's decoder or
// validator (seen with fuzzed modules) is an error: a malformed plugin file
// must not take the daemon down.
func compileModule(ctx context.Context, wrt wazero.Runtime, bin []byte) (code wazero.CompiledModule, err error) {
	defer func() {
		if p := recover(); p != nil {
			code, err = nil, fmt.Errorf("wazero failed on the module: %v", p)
		}
	}()
	return wrt.CompileModule(ctx, bin)
}

// checkABI validates the module's imports and exports against ABI v1.
func checkABI(code wazero.CompiledModule, wasi api.Module) error {
	var problems []string
	wasiFns := wasi.ExportedFunctionDefinitions()
	host := map[string]hostFn{}
	for _, f := range hostFns {
		host[f.name] = f
	}
	for _, f := range code.ImportedFunctions() {
		mod, name, _ := f.Import()
		switch mod {
		case abi.ImportModule:
			h, ok := host[name]
			if !ok {
				problems = append(problems, fmt.Sprintf("imports %s.%s, which ABI v1 does not offer", mod, name))
			} else if !sameSig(f.ParamTypes(), h.params) || !sameSig(f.ResultTypes(), h.results) {
				problems = append(problems, fmt.Sprintf("imports %s.%s with signature %s, ABI v1 has %s",
					mod, name, sig(f.ParamTypes(), f.ResultTypes()), sig(h.params, h.results)))
			}
		case abi.WASIModule:
			w, ok := wasiFns[name]
			if !ok {
				problems = append(problems, fmt.Sprintf("imports %s.%s, which hostd does not offer", mod, name))
			} else if !sameSig(f.ParamTypes(), w.ParamTypes()) || !sameSig(f.ResultTypes(), w.ResultTypes()) {
				problems = append(problems, fmt.Sprintf("imports %s.%s with signature %s, hostd has %s",
					mod, name, sig(f.ParamTypes(), f.ResultTypes()), sig(w.ParamTypes(), w.ResultTypes())))
			}
		default:
			problems = append(problems, fmt.Sprintf("imports %s.%s: unknown import module %q (want %q or %q)", mod, name, mod, abi.ImportModule, abi.WASIModule))
		}
	}
	for _, m := range code.ImportedMemories() {
		mod, name, _ := m.Import()
		problems = append(problems, fmt.Sprintf("imports memory %s.%s; a plugin must define and export its own memory", mod, name))
	}
	exports := code.ExportedFunctions()
	if _, ok := exports[abi.ExportABIMarker]; !ok {
		other := ""
		for n := range exports {
			if strings.HasPrefix(n, "hostd_abi_v") {
				other = n
			}
		}
		if other != "" {
			problems = append(problems, fmt.Sprintf("exports %s, but this hostd speaks ABI v1 (%s)", other, abi.ExportABIMarker))
		} else {
			problems = append(problems, fmt.Sprintf("missing export %s (not a hostd ABI v1 plugin; build with the hostd sdk)", abi.ExportABIMarker))
		}
	}
	want := []struct {
		name            string
		params, results []api.ValueType
	}{
		{abi.ExportAlloc, []api.ValueType{i32}, []api.ValueType{i32}},
		{abi.ExportHandle, []api.ValueType{i32, i32, i32}, []api.ValueType{i32}},
	}
	for _, w := range want {
		f, ok := exports[w.name]
		switch {
		case !ok:
			problems = append(problems, "missing export "+w.name)
		case !sameSig(f.ParamTypes(), w.params) || !sameSig(f.ResultTypes(), w.results):
			problems = append(problems, fmt.Sprintf("export %s has signature %s, want %s", w.name,
				sig(f.ParamTypes(), f.ResultTypes()), sig(w.params, w.results)))
		}
	}
	if f, ok := exports[abi.ExportInitialize]; ok && (len(f.ParamTypes()) != 0 || len(f.ResultTypes()) != 0) {
		problems = append(problems, "export _initialize must take and return nothing")
	}
	if _, ok := code.ExportedMemories()[abi.ExportMemory]; !ok {
		problems = append(problems, "missing export memory")
	}
	if len(problems) > 0 {
		return fmt.Errorf("%w: %s", ErrInvalidModule, strings.Join(problems, "; "))
	}
	return nil
}

func sameSig(a, b []api.ValueType) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func sig(params, results []api.ValueType) string {
	names := func(ts []api.ValueType) string {
		s := make([]string, len(ts))
		for i, t := range ts {
			s[i] = api.ValueTypeName(t)
		}
		return strings.Join(s, ",")
	}
	return "(" + names(params) + ")->(" + names(results) + ")"
}

// testStartFault, when set by a test, makes instantiation fail (fault
// injection for the crash-loop backoff test).
var testStartFault atomic.Pointer[func(plugin string) error]

// instantiate creates an instance and runs _initialize. first records the
// registrations; later instances must register exactly the same handlers.
func (v *version) instantiate(ctx context.Context, first bool) (*instance, error) {
	if f := testStartFault.Load(); f != nil {
		if err := (*f)(v.name); err != nil {
			return nil, err
		}
	}
	inst := &instance{cs: &callState{v: v, inInit: true}}
	inst.stdout = &stdio{cs: inst.cs, stream: "stdout", level: slog.LevelInfo}
	inst.stderr = &stdio{cs: inst.cs, stream: "stderr", level: slog.LevelWarn}
	mc := wazero.NewModuleConfig().
		WithName("").
		WithStartFunctions(). // _initialize is called below, with our context
		WithSysWalltime().
		WithSysNanotime().
		WithRandSource(rand.Reader).
		WithStdout(inst.stdout).
		WithStderr(inst.stderr)
	// No WithFS/WithEnv/WithArgs: no filesystem, environment or arguments.
	// Nanosleep stays wazero's no-op: guests cannot sleep.
	// Initialization is bounded by its own timeout (Limits.InitTimeout): a
	// short call timeout must not make a plugin unloadable on a slow
	// machine, and a guest that never returns from its start function or
	// _initialize must not hold up the load (or a reload) for long.
	timeout := v.limits.InitTimeout
	ictx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	ictx = context.WithValue(ictx, stateKey, inst.cs)
	inst.cs.begin(0, nil, nil)
	mod, err := v.wrt.InstantiateModule(ictx, v.code, mc)
	if err != nil {
		return nil, v.startError(ctx, ictx, false, "instantiate", err, inst)
	}
	inst.mod = mod
	if v.interrupt == modeInstrumented {
		counter, ok := mod.ExportedGlobal(InterruptExport).(api.MutableGlobal)
		if !ok {
			_ = mod.Close(context.Background())
			return nil, fmt.Errorf("instantiate: the instrumented module lacks its %s global", InterruptExport)
		}
		inst.wd = newWatchdog(counter)
	}
	// The module's start function (exported by the rewrite, see
	// instrument), then _initialize, under the watchdog.
	for _, fn := range []string{StartExport, abi.ExportInitialize} {
		f := mod.ExportedFunction(fn)
		if f == nil || (fn == StartExport && v.interrupt != modeInstrumented) {
			continue
		}
		inst.wd.arm(ictx, timeout, cancel)
		_, err := f.Call(ictx)
		expired := inst.wd.disarm()
		if err != nil {
			_ = mod.Close(context.Background())
			step := fn
			if fn == StartExport {
				step = "start function"
			}
			return nil, v.startError(ctx, ictx, expired, step, err, inst)
		}
	}
	inst.stdout.flush()
	inst.stderr.flush()
	inst.cs.inInit = false
	if inst.cs.regError != "" {
		_ = mod.Close(context.Background())
		return nil, fmt.Errorf("%w: %s", ErrInvalidModule, inst.cs.regError)
	}
	if first {
		if len(inst.cs.regs) == 0 {
			_ = mod.Close(context.Background())
			return nil, fmt.Errorf("%w: registered no handlers during initialization (call sdk.OnAck, sdk.OnValidate, sdk.ResourceKeys or sdk.Policy from init)", ErrInvalidModule)
		}
	} else if !sameRegs(inst.cs.regs, v.regs) {
		_ = mod.Close(context.Background())
		return nil, fmt.Errorf("%w: a new instance registered different handlers than the first (registration must be deterministic)", ErrInvalidModule)
	}
	inst.handle = mod.ExportedFunction(abi.ExportHandle)
	inst.alloc = mod.ExportedFunction(abi.ExportAlloc)
	if inst.wd != nil {
		v.track(inst.wd)
	}
	v.live.Add(1)
	return inst, nil
}

func sameRegs(a, b []registration) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// startError describes a failed start of an instance: a timeout (the init
// timeout passed: expired, or ictx's deadline) wraps ErrInitTimeout, a
// canceled parent says so; other errors keep wazero's message.
func (v *version) startError(parent, ictx context.Context, expired bool, step string, err error, inst *instance) error {
	inst.stdout.flush()
	inst.stderr.flush()
	switch {
	case parent.Err() != nil:
		return fmt.Errorf("%s: canceled: %w", step, context.Cause(parent))
	case expired || errors.Is(ictx.Err(), context.DeadlineExceeded):
		return fmt.Errorf("%w: %s did not return within the %s init timeout (plugins.init_timeout)", ErrInitTimeout, step, v.limits.InitTimeout)
	}
	msg := err.Error()
	if tail := inst.stderr.summary(); tail != "" {
		msg += "; stderr: " + tail
	}
	return fmt.Errorf("%s: %s", step, msg)
}

// acquire takes an instance from the pool. While the pool is empty it
// waits, unless no instance is alive and starting one keeps failing.
func (v *version) acquire(ctx context.Context) (*instance, error) {
	select {
	case inst := <-v.pool:
		return inst, nil
	default:
	}
	t := time.NewTicker(5 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case inst := <-v.pool:
			return inst, nil
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-t.C:
			if v.ctx.Err() != nil {
				return nil, &PluginError{Plugin: v.name, Kind: KindUnavailable, Message: "plugin runtime closed"}
			}
			if v.live.Load() == 0 && v.startFailures.Load() > 0 {
				msg := "no instance could be started"
				if p := v.lastErr.Load(); p != nil {
					msg += ": " + *p
				}
				return nil, &PluginError{Plugin: v.name, Kind: KindUnavailable, Message: msg}
			}
		}
	}
}

func (v *version) release(inst *instance) { v.pool <- inst }

// discard closes a broken instance and refills its slot in the background
// (with backoff while instantiation keeps failing). The refill goroutine
// owns the slot until it puts an instance back.
func (v *version) discard(inst *instance) {
	v.untrack(inst.wd)
	_ = inst.mod.Close(context.Background())
	v.live.Add(-1)
	if v.ctx.Err() != nil {
		return
	}
	v.wg.Add(1)
	go func() {
		defer v.wg.Done()
		v.refill()
	}()
}

func (v *version) refill() {
	for {
		inst, err := v.instantiate(v.ctx, false)
		if err == nil {
			v.startFailures.Store(0)
			v.backoffMu.Lock()
			v.backoff.Reset()
			v.backoffMu.Unlock()
			v.pool <- inst
			return
		}
		if v.ctx.Err() != nil {
			return
		}
		n := v.startFailures.Add(1)
		msg := err.Error()
		v.lastErr.Store(&msg)
		v.backoffMu.Lock()
		delay := v.backoff.Next()
		v.backoffMu.Unlock()
		v.rt.logger.Warn("plugin instance failed to start; backing off", "plugin", v.name, "failures", n, "retry_in", delay, "err", err)
		select {
		case <-v.rt.cfg.Clock.After(delay):
		case <-v.ctx.Done():
			return
		}
	}
}

// metricAttrs returns the (plugin, handler) attributes of call metrics,
// built once per version and handler kind (building an attribute set per
// call costs more than a short guest call).
func (v *version) metricAttrs(kind abi.Kind) metric.MeasurementOption {
	v.attrsOnce.Do(func() {
		for k := range v.attrs {
			v.attrs[k] = metric.WithAttributes(attribute.String("plugin", v.name), attribute.String("handler", abi.Kind(k).String()))
		}
	})
	if int(kind) >= 0 && int(kind) < len(v.attrs) {
		return v.attrs[kind]
	}
	return metric.WithAttributes(attribute.String("plugin", v.name), attribute.String("handler", kind.String()))
}

// track registers an instance's watchdog for closeNow.
func (v *version) track(w *watchdog) {
	v.wdMu.Lock()
	defer v.wdMu.Unlock()
	if v.wdClosed {
		w.kill()
	}
	if v.wds == nil {
		v.wds = map[*watchdog]struct{}{}
	}
	v.wds[w] = struct{}{}
}

// untrack forgets the watchdog of a discarded instance.
func (v *version) untrack(w *watchdog) {
	if w == nil {
		return
	}
	w.close()
	v.wdMu.Lock()
	delete(v.wds, w)
	v.wdMu.Unlock()
}

// closeNow closes the version: background refills stop, instances close.
func (v *version) closeNow() {
	v.closeOnce.Do(func() {
		v.cancel()
		v.wdMu.Lock()
		v.wdClosed = true
		for w := range v.wds {
			w.kill()
		}
		v.wdMu.Unlock()
		v.wg.Wait()
		_ = v.wrt.Close(context.Background())
	})
}

// retire marks the version replaced; it closes when its last call ends.
func (v *version) retire() {
	v.retired.Store(true)
	if v.refs.Load() == 0 {
		v.closeNow()
	}
}

func (v *version) unref() {
	if v.refs.Add(-1) == 0 && v.retired.Load() {
		v.closeNow()
	}
}

// call runs one handler on one instance.
func (v *version) call(ctx context.Context, kind abi.Kind, name string, id int32, input func([]byte) []byte, kv *kvSession, span trace.Span) (out []byte, err error) {
	if err := ctx.Err(); err != nil {
		// Calling with a dead context would only get the instance closed.
		return nil, &PluginError{Plugin: v.name, Handler: kind.String(), Name: name, Kind: KindCanceled, Message: err.Error()}
	}
	inst, err := v.acquire(ctx)
	if err != nil {
		if pe, ok := err.(*PluginError); ok {
			pe.Handler, pe.Name = kind.String(), name
			return nil, pe
		}
		return nil, &PluginError{Plugin: v.name, Handler: kind.String(), Name: name, Kind: KindCanceled, Message: err.Error()}
	}
	cctx, cancel := context.WithTimeout(ctx, v.limits.CallTimeout)
	defer cancel()
	if inst.wd == nil {
		// Without a watchdog (close-on-context-done), closing the version
		// ends the call's context directly, so that a guest blocked in a
		// host call returns too.
		defer context.AfterFunc(v.ctx, cancel)()
	}
	cctx = context.WithValue(cctx, stateKey, inst.cs)
	cs := inst.cs
	cs.begin(kind, kv, span)
	inst.stderr.reset()
	inst.buf = input(inst.buf[:0])
	n := uint32(len(inst.buf))
	inst.wd.arm(ctx, v.limits.CallTimeout, cancel)
	callErr := inst.write(cctx, n)
	if callErr == nil {
		inst.stack[0], inst.stack[1], inst.stack[2] = api.EncodeI32(id), api.EncodeU32(inst.bufPtr), api.EncodeU32(n)
		callErr = inst.handle.CallWithStack(cctx, inst.stack[:])
	}
	expired := inst.wd.disarm()
	inst.stdout.flush()
	inst.stderr.flush()
	if cs.dropped > 0 {
		v.rt.logger.Warn("plugin output truncated", "plugin", v.name, "dropped_bytes", cs.dropped, "limit", v.limits.MaxLogBytes)
	}
	if callErr != nil {
		pe := v.classify(ctx, cctx, expired, kind, name, callErr, inst)
		v.discard(inst)
		return nil, pe
	}
	code := abi.Code(api.DecodeI32(inst.stack[0]))
	var kindOf ErrorKind
	var msg string
	switch {
	case cs.outErr != "":
		kindOf, msg = KindBadOutput, cs.outErr
	case code == abi.CodeOK:
		if len(cs.output) > 0 {
			out = append([]byte(nil), cs.output...)
		}
	case code == abi.CodeRetryable:
		kindOf, msg = KindRetryable, nonEmpty(cs.errMsg, "handler failed without a message")
	case code == abi.CodePermanent:
		kindOf, msg = KindPermanent, nonEmpty(cs.errMsg, "handler failed without a message")
	default:
		kindOf, msg = KindBadOutput, fmt.Sprintf("handle returned unknown result code %d", code)
	}
	cs.kv, cs.span = nil, nil
	v.release(inst)
	if kindOf != "" {
		return nil, &PluginError{Plugin: v.name, Handler: kind.String(), Name: name, Kind: kindOf, Message: msg}
	}
	return out, nil
}

// write places the input into the guest's buffer, allocating only when the
// cached one is too small.
func (inst *instance) write(ctx context.Context, n uint32) error {
	if n > inst.bufCap || inst.bufPtr == 0 {
		inst.stack[0] = api.EncodeU32(max(n, 4096))
		if err := inst.alloc.CallWithStack(ctx, inst.stack[:]); err != nil {
			return err
		}
		inst.bufPtr, inst.bufCap = api.DecodeU32(inst.stack[0]), max(n, 4096)
		if inst.bufPtr == 0 {
			// A null pointer is an allocation failure (C's malloc), not a
			// buffer at address 0: writing there would corrupt the guest.
			return fmt.Errorf("hostd_alloc(%d) returned 0: the guest could not allocate the input buffer", max(n, 4096))
		}
	}
	if n > 0 && !inst.mod.Memory().Write(inst.bufPtr, inst.buf) {
		return fmt.Errorf("hostd_alloc returned %#x, out of bounds for %d bytes", inst.bufPtr, n)
	}
	return nil
}

func nonEmpty(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// classify turns a failed guest call into a PluginError.
// expired: the watchdog stopped the guest at the call's deadline (its
// timer may fire a moment before cctx's own).
func (v *version) classify(parent, cctx context.Context, expired bool, kind abi.Kind, name string, err error, inst *instance) *PluginError {
	pe := &PluginError{Plugin: v.name, Handler: kind.String(), Name: name}
	stderr := inst.stderr.summary()
	var exit *sys.ExitError
	switch {
	case v.ctx.Err() != nil:
		pe.Kind, pe.Message = KindUnavailable, "plugin runtime closed during the call"
	case parent.Err() != nil:
		pe.Kind, pe.Message = KindCanceled, "caller's context ended during the call: "+parent.Err().Error()
	case expired || errors.Is(cctx.Err(), context.DeadlineExceeded):
		pe.Kind, pe.Message = KindTimeout, fmt.Sprintf("call exceeded the %s call timeout", v.limits.CallTimeout)
	case inst.stderr.oom:
		pe.Kind, pe.Message = KindOOM, fmt.Sprintf("out of memory (limit %d bytes): %s", v.limits.MemoryLimit, stderr)
	case inst.cs.hasError:
		pe.Kind, pe.Message = KindPanic, inst.cs.errMsg
	case errors.As(err, &exit):
		pe.Kind, pe.Message = KindPanic, fmt.Sprintf("guest exited with code %d", exit.ExitCode())
		if stderr != "" {
			pe.Message += ": " + stderr
		}
	default:
		pe.Kind, pe.Message = KindTrap, firstLine(err.Error())
		if stderr != "" {
			pe.Message += ": " + stderr
		}
	}
	return pe
}

func firstLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i]
	}
	return s
}

// stdio captures a guest's stdout or stderr into the log, line by line,
// within the call's log budget, and keeps the beginning of what one call
// wrote for error messages (a Go guest's fatal error starts with the
// reason, then dumps every goroutine).
type stdio struct {
	cs     *callState
	stream string
	level  slog.Level
	line   []byte
	head   []byte
	oom    bool
}

const headMax = 1024

func (s *stdio) Write(p []byte) (int, error) {
	if room := headMax - len(s.head); room > 0 {
		s.head = append(s.head, p[:min(room, len(p))]...)
	}
	s.line = append(s.line, p...)
	for {
		i := bytes.IndexByte(s.line, '\n')
		if i < 0 {
			break
		}
		s.emit(s.line[:i])
		s.line = append(s.line[:0], s.line[i+1:]...)
	}
	if len(s.line) > 4096 {
		s.emit(s.line)
		s.line = s.line[:0]
	}
	return len(p), nil
}

func (s *stdio) emit(line []byte) {
	if bytes.Contains(line, []byte("out of memory")) {
		s.oom = true
	}
	s.cs.log(context.Background(), s.level, s.stream, line)
}

func (s *stdio) flush() {
	if len(s.line) > 0 {
		s.emit(s.line)
		s.line = s.line[:0]
	}
}

// reset forgets what the previous call wrote.
func (s *stdio) reset() { s.head, s.oom = s.head[:0], false }

// summary returns the first lines the current call wrote, joined.
func (s *stdio) summary() string {
	lines := strings.Split(strings.TrimSpace(string(s.head)), "\n")
	if len(lines) > 4 {
		lines = lines[:4]
	}
	return strings.TrimSpace(strings.Join(lines, " | "))
}

package wasm

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/hostd-dev/hostd/sdk/abi"
)

// callState is the per-instance state host functions act on. One call per
// instance at a time, so it is reused across calls and reset by begin.
// Host functions find it through the call's context (stateKey).
type callState struct {
	v      *version
	inInit bool
	kind   abi.Kind
	kv     *kvSession // nil during _initialize
	span   trace.Span

	pending  []byte // result of the last host call, read with take
	output   []byte
	hasError bool
	errMsg   string
	outErr   string // host-call misuse (out-of-bounds pointer, output too large): fails the call as bad_output

	logged   int // bytes logged by this call (log + stdio)
	dropped  int
	regs     []registration // filled during _initialize
	regError string
}

type stateKeyT struct{}

var stateKey stateKeyT

func stateOf(ctx context.Context) *callState {
	cs, _ := ctx.Value(stateKey).(*callState)
	return cs
}

func (cs *callState) begin(kind abi.Kind, kv *kvSession, span trace.Span) {
	cs.kind, cs.kv, cs.span = kind, kv, span
	cs.pending = cs.pending[:0]
	cs.output = cs.output[:0]
	cs.hasError, cs.errMsg, cs.outErr = false, "", ""
	cs.logged, cs.dropped = 0, 0
}

// fault records the first misuse of a host call by the guest (a pointer
// or length outside its memory, an output over the limit): the call then
// fails as bad_output whatever the handler returns, so a guest bug is seen
// rather than silently ignored.
func (cs *callState) fault(format string, args ...any) {
	if cs.outErr == "" {
		cs.outErr = fmt.Sprintf(format, args...)
	}
}

// fail sets a failed host-call result: status and pending message.
func (cs *callState) fail(st abi.Status, msg string) uint64 {
	if len(msg) > abi.MaxErrorLen {
		msg = msg[:abi.MaxErrorLen]
	}
	cs.pending = append(cs.pending[:0], msg...)
	return api.EncodeI64(-int64(st))
}

// ok sets a successful host-call result with pending bytes b.
func (cs *callState) ok(b []byte) uint64 {
	cs.pending = append(cs.pending[:0], b...)
	return api.EncodeI64(int64(len(b)))
}

// read copies n bytes at ptr out of guest memory; ok is false if out of
// bounds.
func read(mod api.Module, ptr, n uint32) ([]byte, bool) {
	if n == 0 {
		return nil, true
	}
	b, ok := mod.Memory().Read(ptr, n)
	if !ok {
		return nil, false
	}
	return append([]byte(nil), b...), true
}

type hostFn struct {
	name    string
	params  []api.ValueType
	results []api.ValueType
	fn      api.GoModuleFunc
}

var (
	i32 = api.ValueTypeI32
	i64 = api.ValueTypeI64
)

// hostFns is ABI v1's host function table: names and signatures are
// checked against a module's imports before it is instantiated.
var hostFns = []hostFn{
	{abi.FnRegister, []api.ValueType{i32, i32, i32, i32}, []api.ValueType{i32}, hostRegister},
	{abi.FnLog, []api.ValueType{i32, i32, i32}, nil, hostLog},
	{abi.FnTake, []api.ValueType{i32, i32}, []api.ValueType{i32}, hostTake},
	{abi.FnSetOutput, []api.ValueType{i32, i32}, nil, hostSetOutput},
	{abi.FnSetError, []api.ValueType{i32, i32}, nil, hostSetError},
	{abi.FnKVGet, []api.ValueType{i32, i32}, []api.ValueType{i64}, hostKVGet},
	{abi.FnKVPut, []api.ValueType{i32, i32, i32, i32}, []api.ValueType{i64}, hostKVPut},
	{abi.FnKVDelete, []api.ValueType{i32, i32}, []api.ValueType{i64}, hostKVDelete},
	{abi.FnKVScan, []api.ValueType{i32, i32, i32, i32, i32}, []api.ValueType{i64}, hostKVScan},
	{abi.FnConfigGet, []api.ValueType{i32, i32}, []api.ValueType{i64}, hostConfigGet},
	{abi.FnSpanEvent, []api.ValueType{i32, i32, i32, i32}, nil, hostSpanEvent},
	{abi.FnSpanAttrs, []api.ValueType{i32, i32}, nil, hostSpanAttrs},
	{abi.FnNow, nil, []api.ValueType{i64}, hostNow},
	// Lease locks and fences (locks.go); optional like every import.
	{abi.FnLockAcquire, []api.ValueType{i32, i32}, []api.ValueType{i64}, hostLockAcquire},
	{abi.FnLockRenew, []api.ValueType{i32, i32, i32, i32, i64}, []api.ValueType{i64}, hostLockRenew},
	{abi.FnLockRelease, []api.ValueType{i32, i32, i32, i32}, []api.ValueType{i64}, hostLockRelease},
	{abi.FnFenceCheck, []api.ValueType{i32, i32, i32, i32, i64}, []api.ValueType{i64}, hostFenceCheck},
	{abi.FnKVPutFenced, []api.ValueType{i32, i32, i32, i32, i32, i32, i32, i32, i64}, []api.ValueType{i64}, hostKVPutFenced},
}

func hostModule(r wazero.Runtime) wazero.HostModuleBuilder {
	b := r.NewHostModuleBuilder(abi.ImportModule)
	for _, f := range hostFns {
		b = b.NewFunctionBuilder().WithGoModuleFunction(f.fn, f.params, f.results).Export(f.name)
	}
	return b
}

func hostRegister(ctx context.Context, mod api.Module, stack []uint64) {
	cs := stateOf(ctx)
	kind, role, okKind := abi.SplitRegisterKind(api.DecodeI32(stack[0]))
	var name []byte
	okName := api.DecodeU32(stack[2]) <= 256
	if okName {
		name, okName = read(mod, api.DecodeU32(stack[1]), api.DecodeU32(stack[2]))
	}
	id := api.DecodeI32(stack[3])
	stack[0] = 0
	if cs == nil || !cs.inInit {
		stack[0] = api.EncodeI32(-int32(abi.StatusNoContext))
		return
	}
	switch {
	case !okName:
		cs.regError = "register: name out of bounds or longer than 256 bytes"
	case !kind.Valid() || !okKind:
		cs.regError = fmt.Sprintf("register: unknown handler kind %#x for %q (kind 1..4 in bits 0..7; role 0, 2 = write or 3 = admin in bits 8..15)", api.DecodeI32(stack[0]), name)
	case kind == abi.KindPolicy && role != abi.RoleDefault:
		cs.regError = fmt.Sprintf("register: policy %q declares a role; roles apply to message types only", name)
	case len(name) == 0 || len(name) > 256:
		cs.regError = "register: name must be 1..256 bytes"
	default:
		for _, r := range cs.regs {
			if r.Kind == kind && r.Name == string(name) {
				cs.regError = fmt.Sprintf("register: %s %q registered twice", kind, name)
			}
		}
		cs.regs = append(cs.regs, registration{Kind: kind, Name: string(name), Role: role, id: id})
		return
	}
	stack[0] = api.EncodeI32(-int32(abi.StatusInvalid))
}

func hostLog(ctx context.Context, mod api.Module, stack []uint64) {
	cs := stateOf(ctx)
	if cs == nil {
		return
	}
	ptr, length := api.DecodeU32(stack[1]), api.DecodeU32(stack[2])
	if !inBounds(mod, ptr, length) {
		cs.fault("log: message (%d bytes at %d) out of bounds", length, ptr)
		return
	}
	// Read (without copying) at most what the call may still log.
	n := min(length, uint32(max(cs.v.limits.MaxLogBytes-cs.logged, 0)))
	if n < length {
		cs.dropped += int(length - n)
	}
	msg, _ := mod.Memory().Read(ptr, n)
	if n == 0 {
		return
	}
	cs.log(ctx, guestLevel(api.DecodeI32(stack[0])), "", msg)
}

// guestLevel clamps a guest's log level to slog's debug..error: a guest
// cannot log above error or invent levels (ERROR+992).
func guestLevel(l int32) slog.Level {
	return slog.Level(min(max(l, int32(slog.LevelDebug)), int32(slog.LevelError)))
}

// inBounds reports whether n bytes at ptr lie inside the guest's memory.
func inBounds(mod api.Module, ptr, n uint32) bool {
	return uint64(ptr)+uint64(n) <= uint64(mod.Memory().Size())
}

// log writes guest output to the host log within the call's budget.
func (cs *callState) log(ctx context.Context, level slog.Level, stream string, msg []byte) {
	limit := cs.v.limits.MaxLogBytes
	if cs.logged >= limit {
		cs.dropped += len(msg)
		return
	}
	if room := limit - cs.logged; len(msg) > room {
		cs.dropped += len(msg) - room
		msg = msg[:room]
	}
	cs.logged += len(msg)
	if !cs.v.rt.logLimit(cs.v.name) {
		return
	}
	attrs := []any{"plugin", cs.v.name}
	if stream != "" {
		attrs = append(attrs, "stream", stream)
	}
	cs.v.rt.logger.Log(ctx, level, strings.TrimRight(string(msg), "\n"), attrs...)
}

// Per-plugin log rate limit: within any logWindow a plugin's log lines
// (log calls, stdout/stderr lines, failed-call warnings) beyond logBurst
// are dropped and counted; the first line of a later window is preceded by
// one warning with the count. An out-of-memory guest dumps ~130 lines per
// call, a flood of failing calls one warning each: neither can drown the
// daemon's log. (MaxLogBytes bounds one call; this bounds a plugin.)
const (
	logWindow = 10 * time.Second
	logBurst  = 50
)

type logLimiter struct {
	mu         sync.Mutex
	start      time.Time
	n          int
	suppressed int
}

// logLimit reports whether plugin may log one more line now.
func (r *Runtime) logLimit(plugin string) bool {
	li, _ := r.logLimits.LoadOrStore(plugin, &logLimiter{})
	l := li.(*logLimiter)
	now := r.cfg.Clock.Now()
	l.mu.Lock()
	if now.Sub(l.start) >= logWindow || now.Before(l.start) {
		if l.suppressed > 0 {
			r.logger.Warn("plugin log lines suppressed", "plugin", plugin, "suppressed", l.suppressed,
				"limit", fmt.Sprintf("%d lines per %s", logBurst, logWindow))
		}
		l.start, l.n, l.suppressed = now, 0, 0
	}
	ok := l.n < logBurst
	if ok {
		l.n++
	} else {
		l.suppressed++
	}
	l.mu.Unlock()
	return ok
}

func hostTake(ctx context.Context, mod api.Module, stack []uint64) {
	cs := stateOf(ctx)
	if cs == nil {
		stack[0] = 0
		return
	}
	ptr, capacity := api.DecodeU32(stack[0]), api.DecodeU32(stack[1])
	n := uint32(len(cs.pending))
	w := min(n, capacity)
	if w > 0 && !mod.Memory().Write(ptr, cs.pending[:w]) {
		cs.fault("take: buffer (%d bytes at %d) out of bounds", w, ptr)
		n = 0
	}
	cs.pending = cs.pending[:0]
	stack[0] = api.EncodeU32(n)
}

func hostSetOutput(ctx context.Context, mod api.Module, stack []uint64) {
	cs := stateOf(ctx)
	if cs == nil {
		return
	}
	ptr, n := api.DecodeU32(stack[0]), api.DecodeU32(stack[1])
	if int(n) > cs.v.limits.MaxOutput {
		cs.outErr = fmt.Sprintf("output of %d bytes exceeds the limit of %d", n, cs.v.limits.MaxOutput)
		return
	}
	b, ok := mod.Memory().Read(ptr, n)
	if !ok {
		cs.fault("set_output: output (%d bytes at %d) out of bounds", n, ptr)
		return
	}
	cs.output = append(cs.output[:0], b...)
}

func hostSetError(ctx context.Context, mod api.Module, stack []uint64) {
	cs := stateOf(ctx)
	if cs == nil {
		return
	}
	ptr, n := api.DecodeU32(stack[0]), api.DecodeU32(stack[1])
	if !inBounds(mod, ptr, n) {
		cs.fault("set_error: message (%d bytes at %d) out of bounds", n, ptr)
		return
	}
	b, _ := mod.Memory().Read(ptr, min(n, abi.MaxErrorLen))
	cs.hasError, cs.errMsg = true, string(b)
}

// kvValue reads a put's value (stack[2], stack[3]: pointer, length): at
// most abi.MaxValueLen bytes, in bounds. On failure it returns the status
// to put in stack[0].
func kvValue(mod api.Module, stack []uint64, cs *callState) ([]byte, uint64, bool) {
	if api.DecodeU32(stack[3]) > abi.MaxValueLen {
		return nil, cs.fail(abi.StatusInvalid, fmt.Sprintf("value must be at most %d bytes", abi.MaxValueLen)), false
	}
	val, ok := read(mod, api.DecodeU32(stack[2]), api.DecodeU32(stack[3]))
	if !ok {
		return nil, cs.fail(abi.StatusInvalid, fmt.Sprintf("value must be in bounds and at most %d bytes", abi.MaxValueLen)), false
	}
	return val, 0, true
}

func kvArgs(ctx context.Context, mod api.Module, stack []uint64, cs *callState) ([]byte, uint64, bool) {
	if cs == nil {
		return nil, api.EncodeI64(-int64(abi.StatusNoContext)), false
	}
	if cs.kv == nil {
		return nil, cs.fail(abi.StatusNoContext, "plugin KV is not available during initialization"), false
	}
	if err := ctx.Err(); err != nil {
		return nil, cs.fail(abi.StatusUnavailable, err.Error()), false
	}
	n := api.DecodeU32(stack[1])
	if n == 0 || n > abi.MaxKeyLen {
		return nil, cs.fail(abi.StatusInvalid, fmt.Sprintf("key must be 1..%d bytes", abi.MaxKeyLen)), false
	}
	key, ok := read(mod, api.DecodeU32(stack[0]), n)
	if !ok {
		return nil, cs.fail(abi.StatusInvalid, fmt.Sprintf("key must be 1..%d bytes in bounds", abi.MaxKeyLen)), false
	}
	return key, 0, true
}

func hostKVGet(ctx context.Context, mod api.Module, stack []uint64) {
	cs := stateOf(ctx)
	key, r, ok := kvArgs(ctx, mod, stack, cs)
	if !ok {
		stack[0] = r
		return
	}
	v, found, err := cs.kv.get(ctx, key)
	switch {
	case err != nil:
		stack[0] = cs.fail(statusOf(err), err.Error())
	case !found:
		stack[0] = cs.fail(abi.StatusNotFound, "not found")
	default:
		stack[0] = cs.ok(v)
	}
}

func hostKVPut(ctx context.Context, mod api.Module, stack []uint64) {
	cs := stateOf(ctx)
	key, r, ok := kvArgs(ctx, mod, stack, cs)
	if !ok {
		stack[0] = r
		return
	}
	val, r, ok := kvValue(mod, stack, cs)
	if !ok {
		stack[0] = r
		return
	}
	if err := cs.kv.put(ctx, key, val, false); err != nil {
		stack[0] = cs.fail(statusOf(err), err.Error())
		return
	}
	stack[0] = cs.ok(nil)
}

func hostKVDelete(ctx context.Context, mod api.Module, stack []uint64) {
	cs := stateOf(ctx)
	key, r, ok := kvArgs(ctx, mod, stack, cs)
	if !ok {
		stack[0] = r
		return
	}
	if err := cs.kv.put(ctx, key, nil, true); err != nil {
		stack[0] = cs.fail(statusOf(err), err.Error())
		return
	}
	stack[0] = cs.ok(nil)
}

func hostKVScan(ctx context.Context, mod api.Module, stack []uint64) {
	cs := stateOf(ctx)
	if cs == nil || cs.kv == nil {
		if cs == nil {
			stack[0] = api.EncodeI64(-int64(abi.StatusNoContext))
		} else {
			stack[0] = cs.fail(abi.StatusNoContext, "plugin KV is not available during initialization")
		}
		return
	}
	if err := ctx.Err(); err != nil {
		stack[0] = cs.fail(abi.StatusUnavailable, err.Error())
		return
	}
	limit := int(api.DecodeI32(stack[4]))
	var prefix, after []byte
	ok1, ok2 := api.DecodeU32(stack[1]) <= abi.MaxKeyLen, api.DecodeU32(stack[3]) <= abi.MaxKeyLen
	if ok1 && ok2 {
		prefix, ok1 = read(mod, api.DecodeU32(stack[0]), api.DecodeU32(stack[1]))
		after, ok2 = read(mod, api.DecodeU32(stack[2]), api.DecodeU32(stack[3]))
	}
	if !ok1 || !ok2 || limit < 1 || limit > abi.MaxScanLimit {
		stack[0] = cs.fail(abi.StatusInvalid, fmt.Sprintf("kv_scan: prefix/after must be in bounds and at most %d bytes, limit 1..%d", abi.MaxKeyLen, abi.MaxScanLimit))
		return
	}
	l, err := cs.kv.scan(ctx, prefix, after, limit)
	if err != nil {
		stack[0] = cs.fail(statusOf(err), err.Error())
		return
	}
	stack[0] = cs.ok(abi.AppendKVList(nil, &l))
}

func hostConfigGet(ctx context.Context, mod api.Module, stack []uint64) {
	cs := stateOf(ctx)
	if cs == nil {
		stack[0] = api.EncodeI64(-int64(abi.StatusNoContext))
		return
	}
	key, ok := mod.Memory().Read(api.DecodeU32(stack[0]), api.DecodeU32(stack[1]))
	if !ok {
		stack[0] = cs.fail(abi.StatusInvalid, "config_get: key out of bounds")
		return
	}
	v, found := cs.v.config[string(key)]
	if !found {
		stack[0] = cs.fail(abi.StatusNotFound, "no such setting")
		return
	}
	stack[0] = cs.ok([]byte(v))
}

// decodeAttrs reads an Attrs envelope; out of bounds is a fault of the
// call (malformed attrs are ignored, as documented).
func decodeAttrs(cs *callState, fn string, mod api.Module, ptr, n uint32) []attribute.KeyValue {
	b, ok := mod.Memory().Read(ptr, n)
	if !ok {
		cs.fault("%s: attrs (%d bytes at %d) out of bounds", fn, n, ptr)
		return nil
	}
	if n == 0 {
		return nil
	}
	attrs, err := abi.DecodeAttrs(b)
	if err != nil {
		return nil
	}
	kvs := make([]attribute.KeyValue, len(attrs))
	for i, a := range attrs {
		kvs[i] = attribute.String(a.Key, a.Value)
	}
	return kvs
}

func hostSpanEvent(ctx context.Context, mod api.Module, stack []uint64) {
	cs := stateOf(ctx)
	if cs == nil {
		return
	}
	name, ok := mod.Memory().Read(api.DecodeU32(stack[0]), api.DecodeU32(stack[1]))
	if !ok {
		cs.fault("span_event: name (%d bytes at %d) out of bounds", api.DecodeU32(stack[1]), api.DecodeU32(stack[0]))
		return
	}
	attrs := decodeAttrs(cs, "span_event", mod, api.DecodeU32(stack[2]), api.DecodeU32(stack[3]))
	if cs.span != nil {
		cs.span.AddEvent(string(name), trace.WithAttributes(attrs...))
	}
}

func hostSpanAttrs(ctx context.Context, mod api.Module, stack []uint64) {
	cs := stateOf(ctx)
	if cs == nil {
		return
	}
	attrs := decodeAttrs(cs, "span_attrs", mod, api.DecodeU32(stack[0]), api.DecodeU32(stack[1]))
	if cs.span != nil {
		cs.span.SetAttributes(attrs...)
	}
}

func hostNow(ctx context.Context, mod api.Module, stack []uint64) {
	stack[0] = api.EncodeI64(time.Now().UnixNano())
}

package sdktest

import (
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hostd-dev/hostd/sdk"
	"github.com/hostd-dev/hostd/sdk/abi"
)

// active guards the process-wide sdk backend: one Harness at a time.
var active sync.Mutex

// Harness runs registered handlers against in-memory host services.
// Create it with New; it is removed when the test ends.
type Harness struct {
	t testing.TB

	mu       sync.Mutex
	kv       map[string][]byte  // committed
	stage    map[string]*[]byte // staged writes of the running ack callback (nil value = delete)
	inCall   bool
	readOnly bool
	config   map[string]string
	logs     []Log
	events   []SpanEvent
	attrs    []abi.Attr
	now      func() time.Time
	maxKeys  int
	maxBytes int
	nextID   uint64
	locks    lockState
}

// Log is one recorded log line. Msg is rendered as the SDK renders it for
// hostd's log: "msg k=v ...".
type Log struct {
	Level int32
	Msg   string
}

func (l Log) String() string { return fmt.Sprintf("%s %s", levelName(l.Level), l.Msg) }

func levelName(l int32) string {
	switch {
	case l >= abi.LevelError:
		return "ERROR"
	case l >= abi.LevelWarn:
		return "WARN"
	case l >= abi.LevelInfo:
		return "INFO"
	}
	return "DEBUG"
}

// SpanEvent is one recorded span event.
type SpanEvent struct {
	Name  string
	Attrs []abi.Attr
}

// New installs a Harness as the SDK's native backend for the rest of the
// test. It fails the test if another Harness is active.
func New(t testing.TB) *Harness {
	t.Helper()
	if !active.TryLock() {
		t.Fatal("sdktest: another Harness is active; the SDK backend is process-wide, so sdktest tests cannot run in parallel or nest")
		return nil
	}
	h := &Harness{
		t:      t,
		kv:     map[string][]byte{},
		config: map[string]string{},
		now:    time.Now,
		nextID: 1,
		locks:  lockState{leases: map[string]*lease{}, fences: map[string]uint64{}},
	}
	prev := sdk.SetBackend(backend{h})
	t.Cleanup(func() {
		sdk.SetBackend(prev)
		active.Unlock()
	})
	return h
}

// SetConfig sets the plugin setting key (what sdk.Config returns).
func (h *Harness) SetConfig(key, value string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.config[key] = value
}

// SetQuota limits the committed-plus-staged KV to maxKeys keys and
// maxBytes bytes of keys plus values (0 = unlimited), as hostd's per-plugin
// quota does.
func (h *Harness) SetQuota(maxKeys, maxBytes int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.maxKeys, h.maxBytes = maxKeys, maxBytes
}

// SetNow replaces the clock behind sdk.Now (default time.Now).
func (h *Harness) SetNow(now func() time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.now = now
}

// KV returns the plugin's committed KV, to inspect or to seed.
func (h *Harness) KV() *KV { return &KV{h} }

// Logs returns the log lines recorded so far.
func (h *Harness) Logs() []Log {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]Log(nil), h.logs...)
}

// Logged reports whether a recorded log line contains substr.
func (h *Harness) Logged(substr string) bool {
	for _, l := range h.Logs() {
		if strings.Contains(l.Msg, substr) {
			return true
		}
	}
	return false
}

// SpanEvents returns the span events recorded so far.
func (h *Harness) SpanEvents() []SpanEvent {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]SpanEvent(nil), h.events...)
}

// SpanAttrs returns the span attributes set so far.
func (h *Harness) SpanAttrs() []abi.Attr {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]abi.Attr(nil), h.attrs...)
}

// Reset clears recorded logs, span events and attributes (not the KV).
func (h *Harness) Reset() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.logs, h.events, h.attrs = nil, nil, nil
}

// Op is one staged KV write of an ack callback.
type Op struct {
	Key    string
	Value  []byte
	Delete bool
}

// Result is the outcome of one handler call.
type Result struct {
	// Code is abi.CodeOK, CodeRetryable or CodePermanent.
	Code abi.Code
	// Message is the handler's error message ("" when OK).
	Message string
	// Output is the handler's raw output envelope (resource keys, policy
	// output; nil for ack callbacks and validators).
	Output []byte
	// Ops are the KV writes an ack callback staged, sorted by key;
	// committed to the harness KV only when Code is CodeOK.
	Ops []Op
	// NoHandler is set when nothing is registered for the call.
	NoHandler bool
}

// OK reports whether the handler succeeded.
func (r Result) OK() bool { return r.Code == abi.CodeOK && !r.NoHandler }

// Permanent reports whether the handler failed with a permanent error.
func (r Result) Permanent() bool { return r.Code == abi.CodePermanent }

// Retryable reports whether the handler failed with a retryable error.
func (r Result) Retryable() bool { return r.Code == abi.CodeRetryable }

// Err returns the failure as an error (nil when OK); a permanent failure
// satisfies sdk.IsPermanent.
func (r Result) Err() error {
	switch {
	case r.NoHandler:
		return fmt.Errorf("%w: %s", sdk.ErrNoHandler, r.Message)
	case r.Code == abi.CodeOK:
		return nil
	case r.Code == abi.CodePermanent:
		return sdk.Permanent(errors.New(r.Message))
	}
	return errors.New(r.Message)
}

func (r Result) String() string {
	if r.OK() {
		return fmt.Sprintf("ok (%d staged ops)", len(r.Ops))
	}
	return fmt.Sprintf("%s: %s", r.Code, r.Message)
}

// Msg builds an ack-callback message of type typ with payload; the harness
// numbers messages 1, 2, ... (Message.ID) with Attempt 1. Change any field
// before passing it to AckMessage.
func (h *Harness) Msg(typ string, payload []byte) sdk.Message {
	h.mu.Lock()
	id := h.nextID
	h.nextID++
	h.mu.Unlock()
	return sdk.Message{ID: id, Type: typ, Payload: payload, Attempt: 1}
}

// Ack runs the ack callback of typ on a new message with payload.
func (h *Harness) Ack(typ string, payload []byte) Result {
	return h.AckMessage(h.Msg(typ, payload))
}

// AckMessage runs the ack callback of m.Type on m. Its staged KV writes are
// committed if it succeeds.
func (h *Harness) AckMessage(m sdk.Message) Result {
	res := h.call(abi.KindAck, m.Type, encode(m), false)
	if res.OK() {
		h.mu.Lock()
		for _, op := range res.Ops {
			if op.Delete {
				delete(h.kv, op.Key)
			} else {
				h.kv[op.Key] = op.Value
			}
		}
		h.mu.Unlock()
	}
	return res
}

// Validate runs the validator of typ on a message with payload (ID 0, as
// before persistence).
func (h *Harness) Validate(typ string, payload []byte) Result {
	return h.ValidateMessage(sdk.Message{Type: typ, Payload: payload})
}

// ValidateMessage runs the validator of m.Type on m.
func (h *Harness) ValidateMessage(m sdk.Message) Result {
	return h.call(abi.KindValidator, m.Type, encode(m), true)
}

// ResourceKeys runs the resource-key function of typ on a message with
// payload and decodes its output.
func (h *Harness) ResourceKeys(typ string, payload []byte) ([]abi.ResourceKey, Result) {
	res := h.call(abi.KindResourceKeys, typ, encode(sdk.Message{Type: typ, Payload: payload}), true)
	if !res.OK() {
		return nil, res
	}
	keys, err := abi.DecodeResourceKeys(res.Output)
	if err != nil {
		res.Code, res.Message = abi.CodePermanent, err.Error()
		return nil, res
	}
	return keys, res
}

// Policy runs the mapping policy name on in and decodes its output.
func (h *Harness) Policy(name string, in sdk.PolicyInput) (sdk.PolicyOutput, Result) {
	res := h.call(abi.KindPolicy, name, abi.AppendPolicyInput(nil, &in), true)
	if !res.OK() {
		return sdk.PolicyOutput{}, res
	}
	out, err := abi.DecodePolicyOutput(res.Output)
	if err != nil {
		res.Code, res.Message = abi.CodePermanent, err.Error()
		return sdk.PolicyOutput{}, res
	}
	return out, res
}

// Call runs the handler registered for (kind, name) on a raw input
// envelope, for tests of envelope handling itself.
func (h *Harness) Call(kind abi.Kind, name string, in []byte) Result {
	return h.call(kind, name, in, kind != abi.KindAck)
}

func encode(m sdk.Message) []byte {
	return abi.AppendMessage(nil, &abi.Message{
		ID: m.ID, Type: m.Type, Payload: m.Payload, Properties: m.Properties,
		VChannels: m.VChannels, Attempt: m.Attempt, TraceParent: m.TraceParent,
	})
}

func (h *Harness) call(kind abi.Kind, name string, in []byte, readOnly bool) Result {
	h.mu.Lock()
	if h.inCall {
		h.mu.Unlock()
		return Result{Code: abi.CodePermanent, Message: "sdktest: a handler called the harness re-entrantly"}
	}
	h.inCall, h.readOnly, h.stage = true, readOnly, map[string]*[]byte{}
	h.mu.Unlock()

	code, out, msg, err := sdk.Dispatch(kind, name, in)

	h.mu.Lock()
	defer h.mu.Unlock()
	res := Result{Code: code, Message: msg, Output: out}
	if err != nil {
		res = Result{Code: abi.CodePermanent, Message: err.Error(), NoHandler: errors.Is(err, sdk.ErrNoHandler)}
	}
	for k, v := range h.stage {
		if v == nil {
			res.Ops = append(res.Ops, Op{Key: k, Delete: true})
		} else {
			res.Ops = append(res.Ops, Op{Key: k, Value: *v})
		}
	}
	sort.Slice(res.Ops, func(i, j int) bool { return res.Ops[i].Key < res.Ops[j].Key })
	h.inCall, h.readOnly, h.stage = false, false, nil
	return res
}

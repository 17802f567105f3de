package sdk

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/hostd-dev/hostd/sdk/abi"
)

// Message is a broadcast message as seen by a handler.
type Message struct {
	// ID is the broadcast ID; 0 for validators and resource-key functions,
	// which run before the broadcast is persisted.
	ID uint64
	// Type is the message type.
	Type string
	// Payload is the message body as sent by the client.
	Payload []byte
	// Properties are the message's string properties.
	Properties map[string]string
	// VChannels are the target vchannels and, for ack callbacks, their
	// append results (logic offset, physical queue, time tick).
	VChannels []abi.VChannel
	// Attempt is the 1-based ack-callback attempt (0 elsewhere).
	Attempt uint32
	// TraceParent is the broadcast's W3C traceparent ("" if none).
	TraceParent string
}

// Decode unmarshals the JSON payload into v. A payload that is not valid
// JSON for v is an error worth returning as Permanent.
func (m Message) Decode(v any) error {
	if err := json.Unmarshal(m.Payload, v); err != nil {
		return fmt.Errorf("sdk: decode %s payload: %w", m.Type, err)
	}
	return nil
}

// Property returns the named property ("" if absent).
func (m Message) Property(name string) string { return m.Properties[name] }

// PolicyInput is what a mapping policy gets (see abi.PolicyInput).
type PolicyInput = abi.PolicyInput

// PolicyOutput is what a mapping policy returns (see abi.PolicyOutput).
type PolicyOutput = abi.PolicyOutput

// Handler signatures.
type (
	// AckFunc is an ack callback.
	AckFunc func(m Message) error
	// ValidateFunc is a validator; an error rejects the broadcast.
	ValidateFunc func(m Message) error
	// ResourceKeysFunc returns the resource keys a message locks.
	ResourceKeysFunc func(m Message) ([]abi.ResourceKey, error)
	// PolicyFunc is a mapping policy.
	PolicyFunc func(in PolicyInput) (PolicyOutput, error)
)

// OnAck registers fn as the ack callback of msgType. Call it from init.
// Registering the same kind and name twice panics. RequireRole(RoleAdmin)
// as an option makes broadcasting msgType an admin's privilege.
func OnAck(msgType string, fn AckFunc, opts ...Option) {
	register(abi.KindAck, msgType, func(in []byte) ([]byte, error) {
		m, err := decodeMessage(in)
		if err != nil {
			return nil, err
		}
		return nil, fn(m)
	}, opts...)
}

// OnValidate registers fn as the validator of msgType. Call it from init.
func OnValidate(msgType string, fn ValidateFunc, opts ...Option) {
	register(abi.KindValidator, msgType, func(in []byte) ([]byte, error) {
		m, err := decodeMessage(in)
		if err != nil {
			return nil, err
		}
		return nil, fn(m)
	}, opts...)
}

// ResourceKeys registers fn as the resource-key function of msgType.
// Call it from init.
func ResourceKeys(msgType string, fn ResourceKeysFunc, opts ...Option) {
	register(abi.KindResourceKeys, msgType, func(in []byte) ([]byte, error) {
		m, err := decodeMessage(in)
		if err != nil {
			return nil, err
		}
		keys, err := fn(m)
		if err != nil {
			return nil, err
		}
		for i, k := range keys {
			if k.Domain == "" || k.Key == "" || k.Mode > abi.Exclusive {
				return nil, Permanent(fmt.Errorf("sdk: resource key %d (%q:%q mode %d) is invalid", i, k.Domain, k.Key, k.Mode))
			}
		}
		return abi.AppendResourceKeys(nil, keys), nil
	}, opts...)
}

// Policy registers fn as the mapping policy called name. Call it from init.
func Policy(name string, fn PolicyFunc, opts ...Option) {
	register(abi.KindPolicy, name, func(in []byte) ([]byte, error) {
		pin, err := abi.DecodePolicyInput(in)
		if err != nil {
			return nil, Permanent(err)
		}
		out, err := fn(pin)
		if err != nil {
			return nil, err
		}
		return abi.AppendPolicyOutput(nil, &out), nil
	}, opts...)
}

func decodeMessage(in []byte) (Message, error) {
	am, err := abi.DecodeMessage(in)
	if err != nil {
		return Message{}, Permanent(err)
	}
	return Message{ID: am.ID, Type: am.Type, Payload: am.Payload, Properties: am.Properties,
		VChannels: am.VChannels, Attempt: am.Attempt, TraceParent: am.TraceParent}, nil
}

// --- errors ---

type permanentError struct{ err error }

func (e *permanentError) Error() string { return e.err.Error() }
func (e *permanentError) Unwrap() error { return e.err }

// Permanent marks err as permanent: the host will not retry the handler.
// Permanent(nil) is nil.
func Permanent(err error) error {
	if err == nil || IsPermanent(err) {
		return err
	}
	return &permanentError{err}
}

// IsPermanent reports whether err (or an error it wraps) was marked with
// Permanent.
func IsPermanent(err error) bool {
	var p *permanentError
	return errors.As(err, &p)
}

// Errors of host services. A HostError wraps one of these.
var (
	// ErrReadOnly: KV writes outside an ack callback.
	ErrReadOnly = errors.New("sdk: plugin KV is read-only in this handler")
	// ErrQuota: a KV write would exceed the plugin's quota.
	ErrQuota = errors.New("sdk: plugin KV quota exceeded")
	// ErrInvalid: bad arguments (empty or too long key, value too large).
	ErrInvalid = errors.New("sdk: invalid argument")
	// ErrUnavailable: the host could not serve the call now; retry later.
	ErrUnavailable = errors.New("sdk: host service unavailable")
	// ErrNoContext: the service is not available here (e.g. KV from init).
	ErrNoContext = errors.New("sdk: host service not available outside a handler")
	// ErrNoBackend: a native build without a Backend (see SetBackend).
	ErrNoBackend = errors.New("sdk: no backend installed (use sdk/sdktest)")
)

// HostError is a failed host call: its status and the host's message.
type HostError struct {
	Status  abi.Status
	Message string
}

func (e *HostError) Error() string {
	return "sdk: host " + e.Status.String() + ": " + e.Message
}

// Unwrap returns the sentinel for the status.
func (e *HostError) Unwrap() error { return statusErr(e.Status) }

func statusErr(s abi.Status) error {
	switch s {
	case abi.StatusReadOnly:
		return ErrReadOnly
	case abi.StatusQuota:
		return ErrQuota
	case abi.StatusInvalid:
		return ErrInvalid
	case abi.StatusNoContext:
		return ErrNoContext
	case abi.StatusLocked:
		return ErrLocked
	case abi.StatusNotHolder:
		return ErrNotHolder
	case abi.StatusExpired:
		return ErrExpired
	case abi.StatusInvalidKey:
		return ErrInvalidKey
	}
	return ErrUnavailable
}

// KV is one entry of a KVScan result.
type KV struct {
	Key   string
	Value []byte
}

// KVGet returns the value of key in the plugin's KV namespace; ok is false
// if the key does not exist. Inside an ack callback it sees the callback's
// own staged writes.
func KVGet(key string) (value []byte, ok bool, err error) { return hostKVGet(key) }

// KVPut sets key to value (ack callbacks only; staged until the host
// commits the callback's result).
func KVPut(key string, value []byte) error {
	if err := checkKey(key); err != nil {
		return err
	}
	if len(value) > abi.MaxValueLen {
		return &HostError{abi.StatusInvalid, "value of " + strconv.Itoa(len(value)) + " bytes exceeds " + strconv.Itoa(abi.MaxValueLen)}
	}
	return hostKVPut(key, value)
}

// KVDelete removes key (ack callbacks only). Deleting an absent key is not
// an error.
func KVDelete(key string) error {
	if err := checkKey(key); err != nil {
		return err
	}
	return hostKVDelete(key)
}

// KVScan returns up to limit entries (1..1000; 0 means 100) whose key
// starts with prefix and sorts after `after` ("" = from the start), in key
// order; more is true if the scan stopped at the limit (continue with
// after = the last key).
func KVScan(prefix, after string, limit int) (entries []KV, more bool, err error) {
	if limit <= 0 {
		limit = 100
	}
	if limit > abi.MaxScanLimit {
		limit = abi.MaxScanLimit
	}
	return hostKVScan(prefix, after, limit)
}

func checkKey(key string) error {
	if key == "" || len(key) > abi.MaxKeyLen {
		return &HostError{abi.StatusInvalid, "key must be 1.." + strconv.Itoa(abi.MaxKeyLen) + " bytes"}
	}
	return nil
}

// Config returns the plugin's setting key from hostd's config.
func Config(key string) (string, bool) { return hostConfig(key) }

// Now returns the host's wall-clock time.
func Now() time.Time { return hostNow() }

// Log levels (the numbers of log/slog).
const (
	LevelDebug = abi.LevelDebug
	LevelInfo  = abi.LevelInfo
	LevelWarn  = abi.LevelWarn
	LevelError = abi.LevelError
)

// Log writes msg with key/value pairs (rendered "msg k=v ...") to hostd's
// log, tagged with the plugin's name.
func Log(level int32, msg string, kv ...any) { hostLog(level, format(msg, kv)) }

// Debug logs at debug level.
func Debug(msg string, kv ...any) { Log(LevelDebug, msg, kv...) }

// Info logs at info level.
func Info(msg string, kv ...any) { Log(LevelInfo, msg, kv...) }

// Warn logs at warn level.
func Warn(msg string, kv ...any) { Log(LevelWarn, msg, kv...) }

// Error logs at error level.
func Error(msg string, kv ...any) { Log(LevelError, msg, kv...) }

func format(msg string, kv []any) string {
	if len(kv) == 0 {
		return msg
	}
	var b strings.Builder
	b.WriteString(msg)
	for i := 0; i < len(kv); i += 2 {
		b.WriteByte(' ')
		b.WriteString(fmt.Sprint(kv[i]))
		b.WriteByte('=')
		if i+1 < len(kv) {
			v := fmt.Sprint(kv[i+1])
			if strings.ContainsAny(v, " \"=") {
				v = strconv.Quote(v)
			}
			b.WriteString(v)
		} else {
			b.WriteString("!MISSING")
		}
	}
	return b.String()
}

// SpanEvent adds an event with string attributes (key, value, ...) to the
// span of the current handler call.
func SpanEvent(name string, kv ...string) { hostSpanEvent(name, pairs(kv)) }

// SpanAttr sets a string attribute on the span of the current handler call.
func SpanAttr(key, value string) { hostSpanAttrs([]abi.Attr{{Key: key, Value: value}}) }

func pairs(kv []string) []abi.Attr {
	attrs := make([]abi.Attr, 0, (len(kv)+1)/2)
	for i := 0; i < len(kv); i += 2 {
		a := abi.Attr{Key: kv[i]}
		if i+1 < len(kv) {
			a.Value = kv[i+1]
		}
		attrs = append(attrs, a)
	}
	return attrs
}

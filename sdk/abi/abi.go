package abi

// Version is the ABI version this package describes. A module declares the
// version it was built for by exporting a function named ExportABIMarker.
const Version = 1

// ImportModule is the Wasm import module name of every host function.
const ImportModule = "hostd"

// Host functions a guest may import from ImportModule. Signatures (Wasm
// value types; every ptr/len pair addresses the guest's linear memory):
//
//	register(kind i32, name_ptr i32, name_len i32, handler_id i32) -> i32
//	log(level i32, msg_ptr i32, msg_len i32)
//	take(ptr i32, cap i32) -> i32
//	set_output(ptr i32, len i32)
//	set_error(ptr i32, len i32)
//	kv_get(key_ptr i32, key_len i32) -> i64
//	kv_put(key_ptr i32, key_len i32, val_ptr i32, val_len i32) -> i64
//	kv_delete(key_ptr i32, key_len i32) -> i64
//	kv_scan(prefix_ptr i32, prefix_len i32, after_ptr i32, after_len i32, limit i32) -> i64
//	config_get(key_ptr i32, key_len i32) -> i64
//	span_event(name_ptr i32, name_len i32, attrs_ptr i32, attrs_len i32)
//	span_attrs(attrs_ptr i32, attrs_len i32)
//	now() -> i64
//
// Functions returning i64 follow the result convention: r >= 0 means
// success and r bytes of result are pending (read them with take);
// r < 0 means the host call failed with status -r (a Status), and a UTF-8
// error message is pending. docs/plugin-abi.md describes each one.
const (
	FnRegister  = "register"
	FnLog       = "log"
	FnTake      = "take"
	FnSetOutput = "set_output"
	FnSetError  = "set_error"
	FnKVGet     = "kv_get"
	FnKVPut     = "kv_put"
	FnKVDelete  = "kv_delete"
	FnKVScan    = "kv_scan"
	FnConfigGet = "config_get"
	FnSpanEvent = "span_event"
	FnSpanAttrs = "span_attrs"
	FnNow       = "now"
)

// Exports a module must (or may) provide.
const (
	// ExportABIMarker declares ABI v1: a function with no params and no
	// results. Its presence is the version check.
	ExportABIMarker = "hostd_abi_v1"
	// ExportAlloc is alloc(size i32) -> ptr i32: the guest returns a buffer
	// of at least size bytes that stays valid until the next alloc or the
	// end of the next handle call.
	ExportAlloc = "hostd_alloc"
	// ExportHandle is handle(handler_id i32, ptr i32, len i32) -> i32: run
	// the handler registered under handler_id on the input envelope at
	// ptr/len; the result is a Code.
	ExportHandle = "hostd_handle"
	// ExportInitialize is the optional reactor initializer (Go c-shared
	// builds export it); the host calls it once per instance, and the
	// guest registers its handlers from inside it.
	ExportInitialize = "_initialize"
	// ExportMemory is the guest's linear memory (required).
	ExportMemory = "memory"
)

// WASIModule is the WASI preview 1 import module. Guests may import it;
// the host provides it with deny-by-default capabilities.
const WASIModule = "wasi_snapshot_preview1"

// Kind is what a registered handler does.
type Kind int32

const (
	// KindAck is an ack callback: runs once every vchannel of a broadcast
	// has acked; name = message type; input Message; output none.
	KindAck Kind = 1
	// KindValidator checks a message before it is persisted; name =
	// message type; input Message; output none; read-only KV.
	KindValidator Kind = 2
	// KindResourceKeys declares the resource keys a message locks; name =
	// message type; input Message; output ResourceKeys encoding; read-only
	// KV.
	KindResourceKeys Kind = 3
	// KindPolicy is a mapping policy; name = policy name; input
	// PolicyInput; output PolicyOutput; read-only KV.
	KindPolicy Kind = 4
)

// String names the kind as used in logs, metrics and the API.
func (k Kind) String() string {
	switch k {
	case KindAck:
		return "ack"
	case KindValidator:
		return "validator"
	case KindResourceKeys:
		return "resource-keys"
	case KindPolicy:
		return "policy"
	}
	return "unknown"
}

// Valid reports whether k is one of the defined kinds.
func (k Kind) Valid() bool { return k >= KindAck && k <= KindPolicy }

// Role is the API role a client's token needs to broadcast a message
// type (POST /v1/broadcasts). A plugin declares it in the kind argument of
// register, bits 8..15 (RegisterKind); 0 means the default, RoleWrite.
// The bits are for message types only (kinds 1..3): a policy is run by
// topic operations, which have roles of their own.
type Role int32

const (
	// RoleDefault: the plugin did not say; RoleWrite applies.
	RoleDefault Role = 0
	// RoleWrite: any token that may change state (write or admin).
	RoleWrite Role = 2
	// RoleAdmin: admin tokens only (as for DELETE /v1/topics/{t}).
	RoleAdmin Role = 3
)

// String names the role as the API does ("write", "admin").
func (r Role) String() string {
	switch r {
	case RoleDefault, RoleWrite:
		return "write"
	case RoleAdmin:
		return "admin"
	}
	return "unknown"
}

// roleShift is where the role sits in register's kind argument.
const roleShift = 8

// RegisterKind is register's kind argument for a handler of kind k whose
// message type needs role r.
func RegisterKind(k Kind, r Role) int32 { return int32(k) | int32(r)<<roleShift }

// SplitRegisterKind splits register's kind argument into the kind and the
// role; ok is false if bits other than the kind's (0..7) and the role's
// (8..15) are set, or the role is neither 0, RoleWrite nor RoleAdmin.
func SplitRegisterKind(v int32) (k Kind, r Role, ok bool) {
	k, r = Kind(v&0xff), Role(v>>roleShift&0xff)
	return k, r, v>>16 == 0 && (r == RoleDefault || r == RoleWrite || r == RoleAdmin)
}

// Code is the result of a handle call.
type Code int32

const (
	// CodeOK: the handler succeeded; its output (if any) was set with
	// set_output.
	CodeOK Code = 0
	// CodeRetryable: the handler failed and may succeed if retried; the
	// message was set with set_error.
	CodeRetryable Code = 1
	// CodePermanent: the handler failed and retrying will not help.
	CodePermanent Code = 2
)

// String names the code.
func (c Code) String() string {
	switch c {
	case CodeOK:
		return "ok"
	case CodeRetryable:
		return "retryable"
	case CodePermanent:
		return "permanent"
	}
	return "invalid"
}

// Status is the failure status of a host call (the negated i64 result).
type Status int64

const (
	// StatusNotFound: kv_get / config_get found no such key.
	StatusNotFound Status = 1
	// StatusInvalid: bad arguments (out-of-bounds pointer, empty or
	// oversized key, malformed attrs).
	StatusInvalid Status = 2
	// StatusQuota: the write would exceed the plugin's KV quota.
	StatusQuota Status = 3
	// StatusReadOnly: KV writes are not allowed in this handler kind.
	StatusReadOnly Status = 4
	// StatusUnavailable: the host could not serve the call (catalog error,
	// deadline passed); the handler should return a retryable error.
	StatusUnavailable Status = 5
	// StatusNoContext: the call is not allowed here (e.g. KV during
	// _initialize).
	StatusNoContext Status = 6
)

// String names the status.
func (s Status) String() string {
	switch s {
	case StatusNotFound:
		return "not_found"
	case StatusInvalid:
		return "invalid"
	case StatusQuota:
		return "quota"
	case StatusReadOnly:
		return "read_only"
	case StatusUnavailable:
		return "unavailable"
	case StatusNoContext:
		return "no_context"
	case StatusLocked:
		return "locked"
	case StatusNotHolder:
		return "not_holder"
	case StatusExpired:
		return "expired"
	case StatusInvalidKey:
		return "invalid_key"
	}
	return "unknown"
}

// Log levels for the log host function (same numbers as log/slog).
const (
	LevelDebug int32 = -4
	LevelInfo  int32 = 0
	LevelWarn  int32 = 4
	LevelError int32 = 8
)

// Limits shared by host and guest.
const (
	// MaxKeyLen is the longest plugin KV key (bytes).
	MaxKeyLen = 1024
	// MaxValueLen is the largest plugin KV value (bytes).
	MaxValueLen = 256 << 10
	// MaxErrorLen is the longest error message the host keeps from
	// set_error or returns to take after a failed host call (bytes).
	MaxErrorLen = 4096
	// MaxScanLimit caps the limit argument of kv_scan.
	MaxScanLimit = 1000
)

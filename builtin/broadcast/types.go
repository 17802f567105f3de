package broadcast

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/hostd-dev/hostd/runtime/catalog"
	"github.com/hostd-dev/hostd/runtime/wal"
	"github.com/hostd-dev/hostd/sdk/abi"
)

// ControlChannel is the reserved vchannel every broadcast includes. Its
// append order (time tick) orders the callbacks of conflicting broadcasts.
const ControlChannel = "_control/0"

// Header properties the engine adds to every appended message (records
// of kind wal.KindBroadcast or KindMarker: only those are the engine's,
// whatever a record's properties say), so that recovery can find an
// append whose checkpoint was not committed.
const (
	HeaderBroadcastID = "hostd.broadcast.id"
	HeaderMessageType = "hostd.message.type"
)

// Message is what is broadcast: a type, an opaque payload and properties.
type Message struct {
	Type       string            `json:"type"`
	Payload    []byte            `json:"payload,omitempty"`
	Properties map[string]string `json:"properties,omitempty"`
}

// Scope qualifies an idempotency key: "" or "cluster" (the default),
// "database" or "collection" with an ID. Encoded unambiguously, so a client
// key containing ':' cannot forge another scope.
type Scope struct {
	Kind string `json:"kind,omitempty"` // "", "cluster", "database", "collection"
	ID   string `json:"id,omitempty"`   // required for database and collection
}

// Wait says when Submit returns.
type Wait string

const (
	WaitDone      Wait = "done"      // after TOMBSTONE or FAILED (default)
	WaitAppended  Wait = "appended"  // after every vchannel is appended
	WaitPersisted Wait = "persisted" // right after the PENDING commit
)

// Request is one broadcast request.
type Request struct {
	Message      Message           `json:"message"`
	VChannels    []string          `json:"vchannels"` // the control channel is added if missing
	ResourceKeys []abi.ResourceKey `json:"resource_keys,omitempty"`
	// IdempotencyKey: empty means no idempotency.
	IdempotencyKey string `json:"idempotency_key,omitempty"`
	Scope          Scope  `json:"scope,omitempty"`
	// AckSyncUp overrides the message type's default when set.
	AckSyncUp *bool `json:"ack_sync_up,omitempty"`
	Wait      Wait  `json:"wait,omitempty"`
}

// State is a task's lifecycle state: PENDING → TOMBSTONE, or PENDING →
// FAILED (→ PENDING again on an admin retry); finished tasks are removed
// by GC.
type State string

const (
	StatePending   State = "PENDING"
	StateTombstone State = "TOMBSTONE"
	StateFailed    State = "FAILED"
)

// Finished reports whether s is TOMBSTONE or FAILED.
func (s State) Finished() bool { return s == StateTombstone || s == StateFailed }

// Checkpoint is the persisted result of one vchannel's append.
type Checkpoint struct {
	VChannel      string `json:"vchannel"`
	Offset        uint64 `json:"offset"`         // logic offset in the vchannel
	PhysicalQueue string `json:"physical_queue"` // where it landed
	TimeTick      uint64 `json:"time_tick"`
}

// Result is what Submit returns.
type Result struct {
	ID        uint64       `json:"id"`
	Duplicate bool         `json:"duplicate"`
	State     State        `json:"state"`
	Appends   []Checkpoint `json:"appends,omitempty"` // sorted by vchannel
	Error     string       `json:"error,omitempty"`   // FAILED: the kept error
}

// VChannelStatus is one target of a task as shown by Get.
type VChannelStatus struct {
	Name       string      `json:"name"`
	Checkpoint *Checkpoint `json:"checkpoint,omitempty"`
	Acked      bool        `json:"acked"`
	Attempts   int         `json:"append_attempts"`
	LastError  string      `json:"last_error,omitempty"`
}

// Abandon records who abandoned a task and why.
type Abandon struct {
	By     string    `json:"by"`
	Reason string    `json:"reason"`
	At     time.Time `json:"at"`
}

// TaskInfo is the full, inspectable state of one task.
type TaskInfo struct {
	ID             uint64            `json:"id"`
	State          State             `json:"state"`
	Message        Message           `json:"message"`
	VChannels      []VChannelStatus  `json:"vchannels"`
	ResourceKeys   []abi.ResourceKey `json:"resource_keys"`
	IdempotencyKey string            `json:"idempotency_key,omitempty"`
	Scope          Scope             `json:"scope,omitempty"`
	AckSyncUp      bool              `json:"ack_sync_up"`
	Attempts       int               `json:"attempts"`  // callback attempts so far (persisted)
	Conflicts      int               `json:"conflicts"` // callback re-runs after a KV conflict
	LastError      string            `json:"last_error,omitempty"`
	NextRetry      *time.Time        `json:"next_retry,omitempty"`
	MissingAcks    []string          `json:"missing_acks,omitempty"`
	TraceID        string            `json:"trace_id,omitempty"`
	CreatedAt      time.Time         `json:"created_at"`
	FinishedAt     *time.Time        `json:"finished_at,omitempty"`
	Abandoned      *Abandon          `json:"abandoned,omitempty"`
}

// Filter selects tasks for List. Zero fields match everything.
type Filter struct {
	State State
	Type  string
	After uint64 // only IDs greater than After (pagination)
	Limit int    // 0 = no limit
}

// ---- interfaces the host provides ----

// Guard is a granted set of resource-key locks.
type Guard interface {
	// Release frees the keys; a second call is a no-op.
	Release()
}

// Locker serializes conflicting broadcasts (builtin/locks, adapted by host).
// Keys may be passed uncanonicalized; the locker dedupes and sorts them.
type Locker interface {
	// Lock blocks until every key is granted or ctx ends.
	Lock(ctx context.Context, keys []abi.ResourceKey) (Guard, error)
	// TryLock grants every key at once or fails naming the conflict.
	TryLock(keys []abi.ResourceKey) (Guard, error)
}

// AppendEntry is one message to append to one vchannel.
type AppendEntry struct {
	VChannel   string
	Payload    []byte
	Properties map[string]string
}

// AppendOutcome is the result of one AppendEntry: a checkpoint or an error.
type AppendOutcome struct {
	Checkpoint Checkpoint
	Err        error
}

// ChannelEntry is one message read back from a vchannel (for recovery).
type ChannelEntry struct {
	Offset     uint64
	Properties map[string]string
	Checkpoint Checkpoint
	// Kind is the record kind stored with the entry: only records of
	// hostd's kinds (wal.KindBroadcast, wal.KindMarker) are the engine's
	// own — a client's data record cannot carry them.
	Kind wal.Kind
}

// Channels resolves vchannels to physical queues and appends to them
// (runtime/wal 1:1, later builtin/mapping, adapted by host).
type Channels interface {
	// Check returns nil if vchannel exists (the control channel always
	// does), or an error wrapping ErrUnknownVChannel.
	Check(ctx context.Context, vchannel string) error
	// Append appends entries in one batch; the outcome slice has one element
	// per entry (partial failure is allowed). A non-nil error fails them all.
	Append(ctx context.Context, entries []AppendEntry) ([]AppendOutcome, error)
	// Read returns up to limit entries of vchannel from logic offset from.
	Read(ctx context.Context, vchannel string, from uint64, limit int) ([]ChannelEntry, error)
	// Next returns a lower bound of the logic offset the next append to
	// vchannel will get (exact when nothing is being appended to it); the
	// engine records it as the recovery low-water mark, for which any
	// lower bound is correct.
	Next(ctx context.Context, vchannel string) (uint64, error)
}

// AtomicAppender is implemented by Channels that can commit every entry of
// one Append together with extra catalog writes in one transaction: all
// entries and the writes, or nothing (a failure fails every entry). The
// engine then persists new tasks' PENDING records with their first
// appends — one durable write where two would be needed otherwise, and
// never an append without its task. ResolverChannels implements it over
// resolvers that implement wal.MultiAppender (the mapping and wal.Direct).
type AtomicAppender interface {
	AppendAtomic(ctx context.Context, entries []AppendEntry, extra []catalog.Op) ([]AppendOutcome, error)
}

// ---- handlers ----

// TypeOptions are per-message-type options.
type TypeOptions struct {
	// MaxAttempts bounds callback attempts; 0 = unlimited (retry forever).
	MaxAttempts int
	// AckSyncUp is the default of Request.AckSyncUp for this type.
	AckSyncUp bool
}

// AckCall is the input of a callback attempt.
type AckCall struct {
	BroadcastID uint64
	Message     Message
	Appends     []Checkpoint // every vchannel's append result, sorted by vchannel
	Attempt     int          // 1-based; continues across restarts
	Recovered   bool         // the task was recovered at this start
	TraceParent string       // W3C traceparent of this attempt's span ("" if not traced)
}

// AckResult is what a successful callback wants committed with the
// TOMBSTONE: its writes and the optimistic conditions of what it read.
type AckResult struct {
	Checks      []catalog.Check
	RangeChecks []catalog.RangeCheck
	Ops         []catalog.Op
}

// Handler serves one message type. Built-ins and plugins implement it.
// Calls may be concurrent for different broadcasts.
type Handler interface {
	// ResourceKeys returns the keys the type itself declares for msg.
	ResourceKeys(ctx context.Context, msg *Message) ([]abi.ResourceKey, error)
	// Validate checks msg under the locks, before anything is persisted;
	// kv is a read-only catalog snapshot. Any error rejects the request.
	Validate(ctx context.Context, msg *Message, kv catalog.Reader) error
	// Ack is the ack callback. It must not write anything itself; it
	// returns its writes and read conditions (see package doc). Errors are
	// retried unless IsPermanent.
	Ack(ctx context.Context, call *AckCall) (AckResult, error)
}

// HandlerSource finds the handler of a non-built-in message type (the host
// adapts the plugin runtime to it).
type HandlerSource interface {
	Lookup(msgType string) (Handler, TypeOptions, bool)
}

// Noop is the built-in no-op type: no keys, no validation, no effects.
type Noop struct{}

func (Noop) ResourceKeys(context.Context, *Message) ([]abi.ResourceKey, error) { return nil, nil }
func (Noop) Validate(context.Context, *Message, catalog.Reader) error          { return nil }
func (Noop) Ack(context.Context, *AckCall) (AckResult, error)                  { return AckResult{}, nil }

// NoopType is the name Noop is registered under by the host.
const NoopType = "noop"

// ---- errors ----

var (
	ErrInvalidRequest  = errors.New("broadcast: invalid request")
	ErrUnknownType     = errors.New("broadcast: unknown message type")
	ErrUnknownVChannel = errors.New("broadcast: unknown vchannel")
	ErrNotFound        = errors.New("broadcast: task not found")
	ErrKeyTooLong      = errors.New("broadcast: idempotency key too long")
	ErrTooLarge        = errors.New("broadcast: too large")
	ErrRejected        = errors.New("broadcast: rejected by validator")
	ErrInvalidState    = errors.New("broadcast: invalid state for operation")
	ErrClosed          = errors.New("broadcast: engine closed")
	ErrNotStarted      = errors.New("broadcast: engine not started (recovery has not finished)")
	ErrCorruptCatalog  = errors.New("broadcast: corrupt catalog")
	ErrNotAckable      = errors.New("broadcast: vchannel not ackable")
	// ErrIdempotencyConflict: an idempotency key reused with a different
	// request (see IdempotencyConflictError).
	ErrIdempotencyConflict = errors.New("broadcast: idempotency key reused with a different request")
)

type permanentError struct{ err error }

func (p *permanentError) Error() string { return p.err.Error() }
func (p *permanentError) Unwrap() error { return p.err }

// Permanent marks err as permanent: the callback is not retried and the
// task goes to FAILED. Permanent(nil) is nil.
func Permanent(err error) error {
	if err == nil {
		return nil
	}
	return &permanentError{err}
}

// IsPermanent reports whether err (or anything it wraps) was marked with
// Permanent.
func IsPermanent(err error) bool {
	var p *permanentError
	return errors.As(err, &p)
}

// RejectedError wraps a validator's rejection with the message type.
type RejectedError struct {
	Type string
	Err  error
}

func (e *RejectedError) Error() string {
	return fmt.Sprintf("broadcast: %s rejected by validator: %v", e.Type, e.Err)
}
func (e *RejectedError) Unwrap() []error { return []error{ErrRejected, e.Err} }

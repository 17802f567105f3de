package wire

import "time"

// Scope qualifies an idempotency key: kind "" or "cluster" (the default),
// "database" or "collection" with an id.
type Scope struct {
	Kind string `json:"kind,omitempty"`
	ID   string `json:"id,omitempty"`
}

// BroadcastRequest is the body of POST /v1/broadcasts. Payload is base64;
// PayloadText is an alternative for text payloads (give one of them).
type BroadcastRequest struct {
	Type           string            `json:"type"`
	Payload        []byte            `json:"payload,omitempty"`
	PayloadText    string            `json:"payload_text,omitempty"`
	Properties     map[string]string `json:"properties,omitempty"`
	VChannels      []string          `json:"vchannels,omitempty"`
	ResourceKeys   []ResourceKey     `json:"resource_keys,omitempty"`
	IdempotencyKey string            `json:"idempotency_key,omitempty"`
	Scope          Scope             `json:"scope"`
	AckSyncUp      *bool             `json:"ack_sync_up,omitempty"`
	// Wait: "done" (default), "appended" or "persisted".
	Wait string `json:"wait,omitempty"`
	// Timeout bounds the wait ("5s"); default and maximum: the request
	// timeout. When it ends first, an original request whose task is
	// persisted gets 202 with its ID and state PENDING; a duplicate, or an
	// original not persisted yet, gets 504 timeout (no ID).
	Timeout string `json:"timeout,omitempty"`
}

// Checkpoint is where a broadcast landed on one vchannel.
type Checkpoint struct {
	VChannel      string `json:"vchannel"`
	Offset        uint64 `json:"offset"`
	PhysicalQueue string `json:"physical_queue"`
	TimeTick      Tick   `json:"time_tick"`
}

// BroadcastResult is the answer of POST /v1/broadcasts (200, or 202 with
// TimedOut when the wait ended first: the broadcast is persisted and will
// complete).
type BroadcastResult struct {
	ID        uint64       `json:"id"`
	Duplicate bool         `json:"duplicate"`
	State     string       `json:"state"`
	Appends   []Checkpoint `json:"appends,omitempty"` // sorted by vchannel
	Error     string       `json:"error,omitempty"`   // FAILED: the kept error
	TimedOut  bool         `json:"timed_out,omitempty"`
}

// Message is a broadcast message: a type, an opaque payload (base64) and
// properties.
type Message struct {
	Type       string            `json:"type"`
	Payload    []byte            `json:"payload,omitempty"`
	Properties map[string]string `json:"properties,omitempty"`
}

// VChannelStatus is one target of a broadcast task.
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

// BroadcastTask is one broadcast task as GET /v1/broadcasts/{id} shows it.
type BroadcastTask struct {
	ID             uint64           `json:"id"`
	State          string           `json:"state"` // PENDING, TOMBSTONE or FAILED
	Message        Message          `json:"message"`
	VChannels      []VChannelStatus `json:"vchannels"`
	IdempotencyKey string           `json:"idempotency_key,omitempty"`
	Scope          Scope            `json:"scope"`
	AckSyncUp      bool             `json:"ack_sync_up"`
	Attempts       int              `json:"attempts"`  // callback attempts so far
	Conflicts      int              `json:"conflicts"` // callback re-runs after a KV conflict
	LastError      string           `json:"last_error,omitempty"`
	NextRetry      *time.Time       `json:"next_retry,omitempty"`
	MissingAcks    []string         `json:"missing_acks,omitempty"`
	TraceID        string           `json:"trace_id,omitempty"`
	CreatedAt      time.Time        `json:"created_at"`
	FinishedAt     *time.Time       `json:"finished_at,omitempty"`
	Abandoned      *Abandon         `json:"abandoned,omitempty"`
	ResourceKeys   []ResourceKey    `json:"resource_keys"`
}

// AckRequest is the body of POST /v1/broadcasts/{id}/acks.
type AckRequest struct {
	VChannel string `json:"vchannel"`
}

// AbandonRequest is the body of POST /v1/broadcasts/{id}/abandon.
type AbandonRequest struct {
	Reason string `json:"reason"`
}

// BroadcastLock is one broadcast resource key held or awaited (GET
// /v1/broadcast-locks): its holders (broadcast IDs) and its waiters, each
// marked on the key it is blocked on. Modes are "shared" or "exclusive".
type BroadcastLock struct {
	Domain  string                `json:"domain"`
	Key     string                `json:"key"`
	Mode    string                `json:"mode"`
	Holders []BroadcastLockHolder `json:"holders"`
	Waiters []BroadcastLockWaiter `json:"waiters,omitempty"`
}

// BroadcastLockHolder is a broadcast holding a key.
type BroadcastLockHolder struct {
	BroadcastID uint64    `json:"broadcast_id"`
	Type        string    `json:"type"`
	Mode        string    `json:"mode"`
	Since       time.Time `json:"since"`
}

// BroadcastLockWaiter is a request waiting for a key; BroadcastID is set
// for an admin retry only (a new broadcast gets its ID after its locks).
type BroadcastLockWaiter struct {
	BroadcastID uint64    `json:"broadcast_id,omitempty"`
	Type        string    `json:"type"`
	Mode        string    `json:"mode"`
	Since       time.Time `json:"since"`
	BlockedHere bool      `json:"blocked_here"`
}

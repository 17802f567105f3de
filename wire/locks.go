package wire

import "time"

// LockKey is one key of a lease: in an acquire request domain, key and
// mode ("exclusive", the default, or "shared"); in a grant also the
// grant's fence. Fence must be absent in requests.
type LockKey struct {
	Domain string `json:"domain"`
	Key    string `json:"key"`
	Mode   string `json:"mode,omitempty"`
	Fence  uint64 `json:"fence,omitempty"`
}

// AcquireLockRequest is the body of POST /v1/locks.
type AcquireLockRequest struct {
	Keys           []LockKey         `json:"keys"`
	TTL            string            `json:"ttl,omitempty"`  // e.g. "30s"; default locks.default_ttl
	Wait           string            `json:"wait,omitempty"` // e.g. "5s"; default 0 = fail at once
	Owner          string            `json:"owner"`
	Meta           map[string]string `json:"meta,omitempty"`
	IdempotencyKey string            `json:"idempotency_key,omitempty"`
}

// LockGrant is a lease grant. Token is present only in the answers to
// the acquirer (acquire, renew).
type LockGrant struct {
	ID        string            `json:"id"`
	Token     string            `json:"token,omitempty"`
	Owner     string            `json:"owner"`
	Meta      map[string]string `json:"meta,omitempty"`
	Keys      []LockKey         `json:"keys"`
	Fence     uint64            `json:"fence"`
	TTL       string            `json:"ttl"`
	ExpiresAt time.Time         `json:"expires_at"`
	CreatedAt time.Time         `json:"created_at"`
	Duplicate bool              `json:"duplicate,omitempty"`
}

// LockHolder is one holder of a key (never its token).
type LockHolder struct {
	GrantID   string            `json:"grant_id"`
	Owner     string            `json:"owner"`
	Meta      map[string]string `json:"meta,omitempty"`
	Mode      string            `json:"mode"`
	Fence     uint64            `json:"fence"`
	ExpiresAt time.Time         `json:"expires_at"`
}

// LockWaiter is one queued acquire on a key.
type LockWaiter struct {
	Owner string            `json:"owner"`
	Meta  map[string]string `json:"meta,omitempty"`
	Mode  string            `json:"mode"`
	Since time.Time         `json:"since"`
}

// LockKeyState is the answer of GET /v1/locks/inspect.
type LockKeyState struct {
	Domain  string       `json:"domain"`
	Key     string       `json:"key"`
	Mode    string       `json:"mode"`
	Holders []LockHolder `json:"holders"`
	Waiters []LockWaiter `json:"waiters"`
}

// LockTokenRequest is the body of renew and release.
type LockTokenRequest struct {
	Token string `json:"token"`
	TTL   string `json:"ttl,omitempty"` // renew only; default: the grant's TTL
}

// ReleaseResult is the answer of a release.
type ReleaseResult struct {
	Released bool `json:"released"`
}

// CheckFenceRequest is the body of POST /v1/locks/check-fence.
type CheckFenceRequest struct {
	Domain string `json:"domain"`
	Key    string `json:"key"`
	Fence  uint64 `json:"fence"`
}

// CheckFenceResult is the answer of a check-fence whose fence is current.
type CheckFenceResult struct {
	Current bool `json:"current"`
}

// ForceReleaseRequest is the body of POST /v1/locks/force-release.
type ForceReleaseRequest struct {
	Domain  string `json:"domain"`
	Key     string `json:"key"`
	GrantID string `json:"grant_id,omitempty"` // default: every holder of the key
	Reason  string `json:"reason"`
}

// AuditKey is the key an audit record is about (mode: the evicted grant's
// mode on it).
type AuditKey struct {
	Domain string `json:"domain"`
	Key    string `json:"key"`
	Mode   string `json:"mode"`
}

// AuditRecord is one lock audit record (a forced release).
type AuditRecord struct {
	ID       uint64            `json:"id"`
	At       time.Time         `json:"at"`
	Action   string            `json:"action"`
	Key      AuditKey          `json:"key"`
	GrantID  string            `json:"grant_id"`
	Owner    string            `json:"owner"`
	Meta     map[string]string `json:"meta,omitempty"`
	OldFence uint64            `json:"old_fence"`
	NewFence uint64            `json:"new_fence"`
	Reason   string            `json:"reason"`
	Actor    string            `json:"actor,omitempty"`
}

// ForceReleaseResult tells what a forced release evicted and the bumped
// fence.
type ForceReleaseResult struct {
	Evicted []LockGrant   `json:"evicted"`
	Fence   uint64        `json:"fence"`
	Audit   []AuditRecord `json:"audit"`
}

// AnnounceRequest is the body of POST /v1/presence.
type AnnounceRequest struct {
	Key    string            `json:"key"`
	Holder string            `json:"holder"`
	Meta   map[string]string `json:"meta,omitempty"`
	TTL    string            `json:"ttl,omitempty"`
	Token  string            `json:"token,omitempty"` // required to refresh a live entry
}

// PresenceEntry is one "who is editing" entry. Token is present only in
// the answer to an announce (keep it to refresh and withdraw).
type PresenceEntry struct {
	Key       string            `json:"key"`
	Holder    string            `json:"holder"`
	Meta      map[string]string `json:"meta,omitempty"`
	Since     time.Time         `json:"since"`
	ExpiresAt time.Time         `json:"expires_at"`
	Token     string            `json:"token,omitempty"`
}

// WithdrawRequest is the body of POST /v1/presence/withdraw.
type WithdrawRequest struct {
	Key    string `json:"key"`
	Holder string `json:"holder"`
	Token  string `json:"token"`
}

// WithdrawResult is the answer of a withdraw.
type WithdrawResult struct {
	Withdrawn bool `json:"withdrawn"`
}

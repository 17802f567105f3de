package client

import (
	"context"
	"net/url"
	"time"
)

// LockKey names one key of a lease: mode "exclusive" (default) or "shared".
type LockKey struct {
	Domain string `json:"domain"`
	Key    string `json:"key"`
	Mode   string `json:"mode,omitempty"`
	Fence  uint64 `json:"fence,omitempty"` // in answers: the grant's fence
}

// AcquireLock is the request of Client.AcquireLock.
type AcquireLock struct {
	Keys           []LockKey         `json:"keys"`
	TTL            string            `json:"ttl,omitempty"`  // "30s"; default: the server's default TTL
	Wait           string            `json:"wait,omitempty"` // "5s"; default: fail at once when locked
	Owner          string            `json:"owner"`
	Meta           map[string]string `json:"meta,omitempty"`
	IdempotencyKey string            `json:"idempotency_key,omitempty"`
}

// LockGrant is a lease. Token is set only in the acquirer's answer: keep it
// to renew and release.
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

// LockWaiter is one queued acquire.
type LockWaiter struct {
	Owner string            `json:"owner"`
	Meta  map[string]string `json:"meta,omitempty"`
	Mode  string            `json:"mode"`
	Since time.Time         `json:"since"`
}

// LockKeyState is the answer of InspectLock.
type LockKeyState struct {
	Domain  string       `json:"domain"`
	Key     string       `json:"key"`
	Mode    string       `json:"mode"`
	Holders []LockHolder `json:"holders"`
	Waiters []LockWaiter `json:"waiters"`
}

// LockAudit is one audit record (force-release).
type LockAudit struct {
	ID       uint64            `json:"id"`
	At       time.Time         `json:"at"`
	Action   string            `json:"action"`
	Key      LockKey           `json:"key"`
	GrantID  string            `json:"grant_id"`
	Owner    string            `json:"owner"`
	Meta     map[string]string `json:"meta,omitempty"`
	OldFence uint64            `json:"old_fence"`
	NewFence uint64            `json:"new_fence"`
	Reason   string            `json:"reason"`
	Actor    string            `json:"actor,omitempty"`
}

// ForceReleaseResult is the answer of ForceReleaseLock.
type ForceReleaseResult struct {
	Evicted []LockGrant `json:"evicted"`
	Fence   uint64      `json:"fence"`
	Audit   []LockAudit `json:"audit"`
}

// PresenceEntry is one announcement.
type PresenceEntry struct {
	Key       string            `json:"key"`
	Holder    string            `json:"holder"`
	Meta      map[string]string `json:"meta,omitempty"`
	Since     time.Time         `json:"since"`
	ExpiresAt time.Time         `json:"expires_at"`
	Token     string            `json:"token,omitempty"` // Announce only
}

// Request bodies of the lock and presence calls. Like every type in this
// file they mirror host/api's wire types; TestLockWireTypesInSync proves
// the two stay in sync (see docs/contributing.md, "Wire types").
type (
	lockTokenBody struct { // renew, release
		Token string `json:"token"`
		TTL   string `json:"ttl,omitempty"` // renew only
	}
	checkFenceBody struct {
		Domain string `json:"domain"`
		Key    string `json:"key"`
		Fence  uint64 `json:"fence"`
	}
	forceReleaseBody struct {
		Domain  string `json:"domain"`
		Key     string `json:"key"`
		GrantID string `json:"grant_id,omitempty"`
		Reason  string `json:"reason"`
	}
	announceBody struct {
		Key    string            `json:"key"`
		Holder string            `json:"holder"`
		Meta   map[string]string `json:"meta,omitempty"`
		TTL    string            `json:"ttl,omitempty"`
		Token  string            `json:"token,omitempty"`
	}
	withdrawBody struct {
		Key    string `json:"key"`
		Holder string `json:"holder"`
		Token  string `json:"token"`
	}
)

// AcquireLock takes a lease (POST /v1/locks). Errors: *Error with code
// locked (Details["holders"]), ttl_too_long, invalid_key, canceled, ...
func (c *Client) AcquireLock(ctx context.Context, req AcquireLock) (*LockGrant, error) {
	var g LockGrant
	if err := c.Do(ctx, "POST", "/v1/locks", req, &g); err != nil {
		return nil, err
	}
	return &g, nil
}

// RenewLock extends a lease; ttl "" keeps its TTL. Errors: expired,
// not_holder, ttl_too_long.
func (c *Client) RenewLock(ctx context.Context, id, token, ttl string) (*LockGrant, error) {
	var g LockGrant
	if err := c.Do(ctx, "POST", "/v1/locks/"+url.PathEscape(id)+"/renew", lockTokenBody{Token: token, TTL: ttl}, &g); err != nil {
		return nil, err
	}
	return &g, nil
}

// ReleaseLock ends a lease (a second release by the holder is a no-op).
// Errors: not_holder.
func (c *Client) ReleaseLock(ctx context.Context, id, token string) error {
	return c.Do(ctx, "POST", "/v1/locks/"+url.PathEscape(id)+"/release", lockTokenBody{Token: token}, nil)
}

// ListLocks lists live grants (no tokens).
func (c *Client) ListLocks(ctx context.Context, p Page) (*List[LockGrant], error) {
	var l List[LockGrant]
	if err := c.Do(ctx, "GET", p.Query("/v1/locks"), nil, &l); err != nil {
		return nil, err
	}
	return &l, nil
}

// GetLock returns one live grant (no token).
func (c *Client) GetLock(ctx context.Context, id string) (*LockGrant, error) {
	var g LockGrant
	if err := c.Do(ctx, "GET", "/v1/locks/"+url.PathEscape(id), nil, &g); err != nil {
		return nil, err
	}
	return &g, nil
}

// InspectLock returns the holders and waiters of one key.
func (c *Client) InspectLock(ctx context.Context, domain, key string) (*LockKeyState, error) {
	var s LockKeyState
	q := url.Values{"domain": {domain}, "key": {key}}
	if err := c.Do(ctx, "GET", "/v1/locks/inspect?"+q.Encode(), nil, &s); err != nil {
		return nil, err
	}
	return &s, nil
}

// CheckFence returns nil if fence is a current holder's fence of the key,
// else an *Error with code not_holder.
func (c *Client) CheckFence(ctx context.Context, domain, key string, fence uint64) error {
	return c.Do(ctx, "POST", "/v1/locks/check-fence", checkFenceBody{Domain: domain, Key: key, Fence: fence}, nil)
}

// ForceReleaseLock evicts the holders of a key (or one grant) with a
// reason (admin). The answer's Fence is above every evicted fence.
func (c *Client) ForceReleaseLock(ctx context.Context, domain, key, grantID, reason string) (*ForceReleaseResult, error) {
	var r ForceReleaseResult
	body := forceReleaseBody{Domain: domain, Key: key, GrantID: grantID, Reason: reason}
	if err := c.Do(ctx, "POST", "/v1/locks/force-release", body, &r); err != nil {
		return nil, err
	}
	return &r, nil
}

// LockAuditLog lists force-release audit records, oldest first.
func (c *Client) LockAuditLog(ctx context.Context, p Page) (*List[LockAudit], error) {
	var l List[LockAudit]
	if err := c.Do(ctx, "GET", p.Query("/v1/locks/audit"), nil, &l); err != nil {
		return nil, err
	}
	return &l, nil
}

// Announce adds or refreshes a presence entry; token is "" the first time
// and the returned entry's Token afterwards.
func (c *Client) Announce(ctx context.Context, key, holder string, meta map[string]string, ttl, token string) (*PresenceEntry, error) {
	var e PresenceEntry
	body := announceBody{Key: key, Holder: holder, Meta: meta, TTL: ttl, Token: token}
	if err := c.Do(ctx, "POST", "/v1/presence", body, &e); err != nil {
		return nil, err
	}
	return &e, nil
}

// Withdraw removes the caller's own presence entry.
func (c *Client) Withdraw(ctx context.Context, key, holder, token string) error {
	return c.Do(ctx, "POST", "/v1/presence/withdraw", withdrawBody{Key: key, Holder: holder, Token: token}, nil)
}

// Who lists the live presence entries of a key.
func (c *Client) Who(ctx context.Context, key string) ([]PresenceEntry, error) {
	var l List[PresenceEntry]
	if err := c.Do(ctx, "GET", "/v1/presence?"+url.Values{"key": {key}}.Encode(), nil, &l); err != nil {
		return nil, err
	}
	return l.Items, nil
}

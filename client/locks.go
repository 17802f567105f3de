package client

import (
	"context"
	"net/url"

	"github.com/hostd-dev/hostd/wire"
)

// LockKey names one key of a lease: mode "exclusive" (default) or "shared".
type LockKey = wire.LockKey

// AcquireLock is the request of Client.AcquireLock.
type AcquireLock = wire.AcquireLockRequest

// LockGrant is a lease. Token is set only in the acquirer's answer: keep it
// to renew and release.
type LockGrant = wire.LockGrant

// LockHolder is one holder of a key (never its token).
type LockHolder = wire.LockHolder

// LockWaiter is one queued acquire.
type LockWaiter = wire.LockWaiter

// LockKeyState is the answer of InspectLock.
type LockKeyState = wire.LockKeyState

// LockAudit is one audit record (force-release).
type LockAudit = wire.AuditRecord

// ForceReleaseResult is the answer of ForceReleaseLock.
type ForceReleaseResult = wire.ForceReleaseResult

// PresenceEntry is one announcement.
type PresenceEntry = wire.PresenceEntry

// Request bodies of the lock and presence calls. Like every type in this
// file they mirror host/api's wire types; TestLockWireTypesInSync proves
// the two stay in sync (see docs/contributing.md, "Wire types").

// AcquireLock takes a lease (POST /v1/locks). Errors: *Error with code
// locked (Details["holders"]), ttl_too_long, invalid_key, canceled, ...
// Like SubmitBroadcast it adds a random idempotency key when req has none,
// so a retry after a lost answer returns the same grant.
func (c *Client) AcquireLock(ctx context.Context, req AcquireLock) (*LockGrant, error) {
	if req.IdempotencyKey == "" && c.autoKey {
		req.IdempotencyKey = NewIdempotencyKey()
	}
	var g LockGrant
	if err := c.do(ctx, "POST", "/v1/locks", req, &g, req.IdempotencyKey != ""); err != nil {
		return nil, err
	}
	return &g, nil
}

// RenewLock extends a lease; ttl "" keeps its TTL. Errors: expired,
// not_holder, ttl_too_long.
func (c *Client) RenewLock(ctx context.Context, id, token, ttl string) (*LockGrant, error) {
	var g LockGrant
	if err := c.Do(ctx, "POST", "/v1/locks/"+url.PathEscape(id)+"/renew", wire.LockTokenRequest{Token: token, TTL: ttl}, &g); err != nil {
		return nil, err
	}
	return &g, nil
}

// ReleaseLock ends a lease (a second release by the holder is a no-op).
// Errors: not_holder.
func (c *Client) ReleaseLock(ctx context.Context, id, token string) error {
	return c.Do(ctx, "POST", "/v1/locks/"+url.PathEscape(id)+"/release", wire.LockTokenRequest{Token: token}, nil)
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
	return c.Do(ctx, "POST", "/v1/locks/check-fence", wire.CheckFenceRequest{Domain: domain, Key: key, Fence: fence}, nil)
}

// ForceReleaseLock evicts the holders of a key (or one grant) with a
// reason (admin). The answer's Fence is above every evicted fence.
func (c *Client) ForceReleaseLock(ctx context.Context, domain, key, grantID, reason string) (*ForceReleaseResult, error) {
	var r ForceReleaseResult
	body := wire.ForceReleaseRequest{Domain: domain, Key: key, GrantID: grantID, Reason: reason}
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
	body := wire.AnnounceRequest{Key: key, Holder: holder, Meta: meta, TTL: ttl, Token: token}
	if err := c.Do(ctx, "POST", "/v1/presence", body, &e); err != nil {
		return nil, err
	}
	return &e, nil
}

// Withdraw removes the caller's own presence entry.
func (c *Client) Withdraw(ctx context.Context, key, holder, token string) error {
	return c.Do(ctx, "POST", "/v1/presence/withdraw", wire.WithdrawRequest{Key: key, Holder: holder, Token: token}, nil)
}

// Who lists the live presence entries of a key.
func (c *Client) Who(ctx context.Context, key string) ([]PresenceEntry, error) {
	var l List[PresenceEntry]
	if err := c.Do(ctx, "GET", "/v1/presence?"+url.Values{"key": {key}}.Encode(), nil, &l); err != nil {
		return nil, err
	}
	return l.Items, nil
}

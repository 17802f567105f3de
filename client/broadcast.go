package client

import (
	"context"
	"fmt"
	"net/http"
	"net/url"

	"github.com/hostd-dev/hostd/wire"
)

// Broadcast types on the wire (see docs/api.md).
type (
	BroadcastRequest = wire.BroadcastRequest
	BroadcastResult  = wire.BroadcastResult
	BroadcastTask    = wire.BroadcastTask
	ResourceKey      = wire.ResourceKey
	BroadcastLock    = wire.BroadcastLock
)

// BroadcastFilter selects tasks for ListBroadcasts.
type BroadcastFilter struct {
	State string // PENDING, TOMBSTONE, FAILED or "" for all
	Type  string
}

// SubmitBroadcast submits a broadcast and waits as req.Wait says. A wait
// that ended first comes back with TimedOut set (the broadcast is
// persisted and will complete); errors are *Error with the API's code.
// A request without an idempotency key gets a random one (unless
// WithoutAutoIdempotencyKey), so the call is retried safely when the
// daemon is briefly unavailable (a cluster electing a new leader): the
// retry returns the original broadcast, never a second one.
func (c *Client) SubmitBroadcast(ctx context.Context, req *BroadcastRequest) (*BroadcastResult, error) {
	if req.IdempotencyKey == "" && c.autoKey {
		r := *req
		r.IdempotencyKey = NewIdempotencyKey()
		req = &r
	}
	var out BroadcastResult
	if err := c.do(ctx, http.MethodPost, "/v1/broadcasts", req, &out, req.IdempotencyKey != ""); err != nil {
		return nil, err
	}
	return &out, nil
}

// GetBroadcast returns one task.
func (c *Client) GetBroadcast(ctx context.Context, id uint64) (*BroadcastTask, error) {
	var out BroadcastTask
	if err := c.Do(ctx, http.MethodGet, fmt.Sprintf("/v1/broadcasts/%d", id), nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// ListBroadcasts returns one page of tasks in ID order.
func (c *Client) ListBroadcasts(ctx context.Context, f BroadcastFilter, p Page) (*List[BroadcastTask], error) {
	q := url.Values{}
	if f.State != "" {
		q.Set("state", f.State)
	}
	if f.Type != "" {
		q.Set("type", f.Type)
	}
	path := "/v1/broadcasts"
	if len(q) > 0 {
		path += "?" + q.Encode()
	}
	var out List[BroadcastTask]
	if err := c.Do(ctx, http.MethodGet, p.Query(path), nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// AckBroadcast acks one vchannel of a broadcast (AckSyncUp consumers).
func (c *Client) AckBroadcast(ctx context.Context, id uint64, vchannel string) (*BroadcastTask, error) {
	var out BroadcastTask
	if err := c.Do(ctx, http.MethodPost, fmt.Sprintf("/v1/broadcasts/%d/acks", id), wire.AckRequest{VChannel: vchannel}, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// AbandonBroadcast moves a PENDING broadcast to FAILED (admin).
func (c *Client) AbandonBroadcast(ctx context.Context, id uint64, reason string) (*BroadcastTask, error) {
	var out BroadcastTask
	if err := c.Do(ctx, http.MethodPost, fmt.Sprintf("/v1/broadcasts/%d/abandon", id), wire.AbandonRequest{Reason: reason}, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// RetryBroadcast re-runs a FAILED broadcast (admin).
func (c *Client) RetryBroadcast(ctx context.Context, id uint64) (*BroadcastTask, error) {
	var out BroadcastTask
	if err := c.Do(ctx, http.MethodPost, fmt.Sprintf("/v1/broadcasts/%d/retry", id), struct{}{}, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// BroadcastLocks returns the resource keys held or awaited by broadcasts,
// with their holder broadcast IDs and waiters; domain (and key) filter
// them ("" = all).
func (c *Client) BroadcastLocks(ctx context.Context, domain, key string) ([]BroadcastLock, error) {
	q := url.Values{}
	if domain != "" {
		q.Set("domain", domain)
	}
	if key != "" {
		q.Set("key", key)
	}
	path := "/v1/broadcast-locks"
	if len(q) > 0 {
		path += "?" + q.Encode()
	}
	var out List[BroadcastLock]
	if err := c.Do(ctx, http.MethodGet, path, nil, &out); err != nil {
		return nil, err
	}
	return out.Items, nil
}

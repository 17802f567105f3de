package sdk

import (
	"errors"
	"strconv"
	"time"

	"github.com/hostd-dev/hostd/sdk/abi"
)

// Lease locks and fencing (hostd's lease-lock service, through host
// functions). A lease taken by a plugin is an ordinary grant: operators see
// it in `hostd lock ls` with the plugin's name as owner.
//
// Acquiring never waits: a key held by someone else fails at once with an
// error wrapping ErrLocked (return it from an ack callback and the broadcast
// engine retries the callback with backoff). Acquire, renew, release and
// KVPutFenced are for ack callbacks; validators, resource-key functions and
// policies are read-only and may only CheckFence (elsewhere: ErrReadOnly).

// Errors of the lease functions (a *HostError wraps one of these).
var (
	// ErrLocked: a key is held by someone else; nothing was acquired.
	ErrLocked = errors.New("sdk: locked")
	// ErrNotHolder: wrong token, or the fence is no longer current (the
	// lease expired or was force-released and maybe taken by another).
	ErrNotHolder = errors.New("sdk: not holder")
	// ErrExpired: renewing a lease whose TTL has passed.
	ErrExpired = errors.New("sdk: lease expired")
	// ErrInvalidKey: an empty or oversized lock domain or key, or a bad
	// mode.
	ErrInvalidKey = errors.New("sdk: invalid lock key")
)

// Fence is one key of a lease with its fencing token.
type Fence struct {
	Key   abi.ResourceKey
	Fence uint64
}

// Lease is a granted lease. Token is secret: it renews and releases.
type Lease struct {
	ID     string
	Token  string
	Fences []Fence
	// TTL is the granted time to live; ExpiresAt the wall-clock expiry
	// (for display: hostd enforces TTLs on a monotonic clock).
	TTL       time.Duration
	ExpiresAt time.Time
}

// FenceOf returns the lease's fence on (domain, key).
func (l Lease) FenceOf(domain, key string) (uint64, bool) {
	for _, f := range l.Fences {
		if f.Key.Domain == domain && f.Key.Key == key {
			return f.Fence, true
		}
	}
	return 0, false
}

// LeaseRequest is the full form of AcquireLease.
type LeaseRequest struct {
	Keys []abi.ResourceKey
	// TTL: 0 = hostd's default (locks.default_ttl); at most
	// locks.max_ttl. Rounded down to milliseconds.
	TTL time.Duration
	// Owner is a label: hostd records the owner as "<plugin>/<label>"
	// ("" = the plugin's name), so a plugin cannot pose as someone else.
	Owner string
	// IdempotencyKey: a retried acquire of the same request (keys, owner,
	// TTL) with the same key returns the same grant while it is held (e.g.
	// derive it from Message.ID). Keys are the plugin's own: another
	// principal's grant is never returned.
	IdempotencyKey string
}

// AcquireLease takes every key (shared or exclusive, per key's Mode) or
// none, without waiting. Ack callbacks only.
func AcquireLease(keys []abi.ResourceKey, ttl time.Duration) (Lease, error) {
	return AcquireLeaseWith(LeaseRequest{Keys: keys, TTL: ttl})
}

// AcquireLeaseWith is AcquireLease with an owner and idempotency key.
func AcquireLeaseWith(r LeaseRequest) (Lease, error) {
	if len(r.Keys) == 0 || len(r.Keys) > abi.MaxLeaseKeys {
		return Lease{}, &HostError{abi.StatusInvalidKey, "a lease needs 1.." + strconv.Itoa(abi.MaxLeaseKeys) + " keys"}
	}
	for _, k := range r.Keys {
		if err := checkLockKey(k); err != nil {
			return Lease{}, err
		}
	}
	if r.TTL < 0 {
		return Lease{}, &HostError{abi.StatusInvalid, "negative ttl"}
	}
	return hostLockAcquire(abi.LeaseRequest{Keys: r.Keys, TTLMillis: uint64(r.TTL / time.Millisecond),
		Owner: r.Owner, IdempotencyKey: r.IdempotencyKey})
}

// Renew extends the lease by ttl (0 = its current TTL) and updates l.
// Renewing an expired lease fails with ErrExpired (it never re-acquires).
func (l *Lease) Renew(ttl time.Duration) error {
	if ttl < 0 {
		return &HostError{abi.StatusInvalid, "negative ttl"}
	}
	n, err := hostLockRenew(l.ID, l.Token, ttl)
	if err != nil {
		return err
	}
	l.TTL, l.ExpiresAt = n.TTL, n.ExpiresAt
	if len(n.Fences) > 0 {
		l.Fences = n.Fences
	}
	return nil
}

// Release gives the lease up. Releasing twice is a no-op; a lease that
// expired and went to someone else fails with ErrNotHolder.
func (l Lease) Release() error { return hostLockRelease(l.ID, l.Token) }

// CheckFence returns nil only if fence is a current holder's fence on key
// (key.Mode is ignored). Allowed in every handler kind.
func CheckFence(key abi.ResourceKey, fence uint64) error {
	if err := checkLockKey(key); err != nil {
		return err
	}
	return hostFenceCheck(key, fence)
}

// KVPutFenced stages a KV put that commits only while fence is still a
// current holder's fence on lockKey: a stale fence fails now with
// ErrNotHolder, and hostd re-checks the fence in the transaction that
// commits the callback's writes, so a lease lost in between makes the
// commit fail (the callback runs again) and nothing is written. Ack
// callbacks only.
func KVPutFenced(key string, value []byte, lockKey abi.ResourceKey, fence uint64) error {
	if err := checkKey(key); err != nil {
		return err
	}
	if len(value) > abi.MaxValueLen {
		return &HostError{abi.StatusInvalid, "value of " + strconv.Itoa(len(value)) + " bytes exceeds " + strconv.Itoa(abi.MaxValueLen)}
	}
	if err := checkLockKey(lockKey); err != nil {
		return err
	}
	return hostKVPutFenced(key, value, lockKey, fence)
}

func checkLockKey(k abi.ResourceKey) error {
	if k.Domain == "" || k.Key == "" || len(k.Domain) > abi.MaxKeyLen || len(k.Key) > abi.MaxKeyLen || k.Mode > abi.Exclusive {
		return &HostError{abi.StatusInvalidKey, "lock key needs a domain and key of 1.." + strconv.Itoa(abi.MaxKeyLen) + " bytes and mode shared or exclusive"}
	}
	return nil
}

func leaseFrom(l abi.Lease) Lease {
	out := Lease{ID: l.ID, Token: l.Token, TTL: time.Duration(l.TTLMillis) * time.Millisecond,
		ExpiresAt: time.Unix(0, l.ExpiresAt)}
	for _, k := range l.Keys {
		out.Fences = append(out.Fences, Fence{Key: k.Key, Fence: k.Fence})
	}
	return out
}

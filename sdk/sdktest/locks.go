package sdktest

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/hostd-dev/hostd/sdk"
	"github.com/hostd-dev/hostd/sdk/abi"
)

// In-memory lease locks with fences, serving the SDK's lease functions
// (sdk.AcquireLease, RenewLease, ReleaseLease, CheckFence, KVPutFenced) the
// way hostd's lease-lock service does: all-or-nothing acquire without
// waiting, shared/exclusive per key, a fence per key that increases with
// every grant of that key, TTLs on the harness clock (SetNow). Lease
// changes take effect at once (they are not staged with the callback's KV
// writes, as in hostd, where a grant is the lock service's record).

var _ sdk.LockBackend = backend{}

// DefaultLeaseTTL is the TTL of a lease requested with TTL 0.
const DefaultLeaseTTL = 30 * time.Second

type lease struct {
	id, token, owner, idem string
	fp                     string // the request, for idempotent retries
	keys                   []abi.FencedKey
	ttl                    time.Duration
	expires                time.Time
}

type lockState struct {
	leases map[string]*lease // by id
	fences map[string]uint64 // last fence per key
	next   uint64
}

func keyID(k abi.ResourceKey) string { return k.Domain + ":" + k.Key }

func leaseErr(st abi.Status, format string, args ...any) error {
	return &sdk.HostError{Status: st, Message: fmt.Sprintf(format, args...)}
}

// live returns the unexpired leases. h.mu held.
func (h *Harness) liveLeases() []*lease {
	now := h.now()
	var out []*lease
	for _, l := range h.locks.leases {
		if now.Before(l.expires) {
			out = append(out, l)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].id < out[j].id })
	return out
}

func (h *Harness) leaseWriteAllowed(fn string) error {
	if !h.inCall {
		return noContext(fn)
	}
	if h.readOnly {
		return &sdk.HostError{Status: abi.StatusReadOnly, Message: fn + " is for ack callbacks only"}
	}
	return nil
}

func toLease(l *lease) abi.Lease {
	return abi.Lease{ID: l.id, Token: l.token, TTLMillis: uint64(l.ttl / time.Millisecond),
		ExpiresAt: l.expires.UnixNano(), Keys: append([]abi.FencedKey(nil), l.keys...)}
}

// LockAcquire implements sdk.LockBackend.
func (b backend) LockAcquire(req abi.LeaseRequest) (abi.Lease, error) {
	h := b.h
	h.mu.Lock()
	defer h.mu.Unlock()
	if err := h.leaseWriteAllowed("lock_acquire"); err != nil {
		return abi.Lease{}, err
	}
	if len(req.Keys) == 0 || len(req.Keys) > abi.MaxLeaseKeys {
		return abi.Lease{}, leaseErr(abi.StatusInvalidKey, "a lease names 1..%d keys, got %d", abi.MaxLeaseKeys, len(req.Keys))
	}
	for _, k := range req.Keys {
		if k.Domain == "" || k.Key == "" || k.Mode > abi.Exclusive || len(k.Domain)+len(k.Key) > abi.MaxKeyLen {
			return abi.Lease{}, leaseErr(abi.StatusInvalidKey, "lock key %q:%q mode %d is invalid", k.Domain, k.Key, k.Mode)
		}
	}
	live := h.liveLeases()
	ttl := time.Duration(req.TTLMillis) * time.Millisecond
	if ttl == 0 {
		ttl = DefaultLeaseTTL
	}
	owner := req.Owner
	if owner == "" {
		owner = "plugin"
	}
	fp := leaseFingerprint(req.Keys, owner, ttl)
	if req.IdempotencyKey != "" {
		for _, l := range live {
			if l.idem == req.IdempotencyKey {
				// As in hostd: the same key for a different request
				// (keys and modes, owner, TTL) is refused.
				if l.fp != fp {
					return abi.Lease{}, leaseErr(abi.StatusInvalid, "idempotency key %q was used for a different request (grant %s)", req.IdempotencyKey, l.id)
				}
				return toLease(l), nil
			}
		}
	}
	for _, k := range req.Keys {
		for _, l := range live {
			for _, held := range l.keys {
				if keyID(held.Key) == keyID(k) && (k.Mode == abi.Exclusive || held.Key.Mode == abi.Exclusive) {
					return abi.Lease{}, leaseErr(abi.StatusLocked, "%s is held (%s) by %s", keyID(k), held.Key.Mode, l.owner)
				}
			}
		}
	}
	h.locks.next++
	l := &lease{id: "lease-" + strconv.FormatUint(h.locks.next, 10), token: "token-" + strconv.FormatUint(h.locks.next, 10),
		owner: owner, idem: req.IdempotencyKey, fp: fp, ttl: ttl, expires: h.now().Add(ttl)}
	for _, k := range req.Keys {
		h.locks.fences[keyID(k)]++
		l.keys = append(l.keys, abi.FencedKey{Key: k, Fence: h.locks.fences[keyID(k)]})
	}
	h.locks.leases[l.id] = l
	return toLease(l), nil
}

func (h *Harness) holder(id, token string) (*lease, error) {
	l := h.locks.leases[id]
	if l == nil || l.token != token {
		return nil, leaseErr(abi.StatusNotHolder, "lease %s: no such lease or wrong token", id)
	}
	return l, nil
}

// LockRenew implements sdk.LockBackend.
func (b backend) LockRenew(id, token string, ttl time.Duration) (abi.Lease, error) {
	h := b.h
	h.mu.Lock()
	defer h.mu.Unlock()
	if err := h.leaseWriteAllowed("lock_renew"); err != nil {
		return abi.Lease{}, err
	}
	l, err := h.holder(id, token)
	if err != nil {
		return abi.Lease{}, err
	}
	if !h.now().Before(l.expires) {
		return abi.Lease{}, leaseErr(abi.StatusExpired, "lease %s expired at %s", id, l.expires.Format(time.RFC3339Nano))
	}
	if ttl > 0 {
		l.ttl = ttl
	}
	l.expires = h.now().Add(l.ttl)
	return toLease(l), nil
}

// LockRelease implements sdk.LockBackend.
func (b backend) LockRelease(id, token string) error {
	h := b.h
	h.mu.Lock()
	defer h.mu.Unlock()
	if err := h.leaseWriteAllowed("lock_release"); err != nil {
		return err
	}
	l := h.locks.leases[id]
	if l == nil {
		return nil // released before: a no-op
	}
	if l.token != token {
		return leaseErr(abi.StatusNotHolder, "lease %s: wrong token", id)
	}
	for _, k := range l.keys {
		if h.locks.fences[keyID(k.Key)] != k.Fence && !h.now().Before(l.expires) {
			delete(h.locks.leases, id)
			return leaseErr(abi.StatusNotHolder, "lease %s expired and %s was granted again", id, keyID(k.Key))
		}
	}
	delete(h.locks.leases, id)
	return nil
}

// checkFence reports whether fence is a live holder's current fence on
// key. h.mu held.
func (h *Harness) checkFence(key abi.ResourceKey, fence uint64) error {
	for _, l := range h.liveLeases() {
		for _, fk := range l.keys {
			if keyID(fk.Key) == keyID(key) && fk.Fence == fence {
				return nil
			}
		}
	}
	return leaseErr(abi.StatusNotHolder, "fence %d on %s is not current", fence, keyID(key))
}

// FenceCheck implements sdk.LockBackend.
func (b backend) FenceCheck(key abi.ResourceKey, fence uint64) error {
	h := b.h
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.inCall {
		return noContext("fence_check")
	}
	return h.checkFence(key, fence)
}

// KVPutFenced implements sdk.LockBackend.
func (b backend) KVPutFenced(key string, value []byte, lockKey abi.ResourceKey, fence uint64) error {
	h := b.h
	h.mu.Lock()
	if err := h.leaseWriteAllowed("kv_put_fenced"); err != nil {
		h.mu.Unlock()
		return err
	}
	if err := h.checkFence(lockKey, fence); err != nil {
		h.mu.Unlock()
		return err
	}
	h.mu.Unlock()
	return b.KVPut(key, value)
}

// Leases lists the unexpired leases as "owner key(mode)#fence ..." lines,
// sorted, to assert on in tests.
func (h *Harness) Leases() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []string
	for _, l := range h.liveLeases() {
		parts := []string{l.owner}
		for _, k := range l.keys {
			parts = append(parts, fmt.Sprintf("%s(%s)#%d", keyID(k.Key), k.Key.Mode, k.Fence))
		}
		out = append(out, strings.Join(parts, " "))
	}
	return out
}

// leaseFingerprint identifies an acquire request: its keys with modes
// (exclusive wins over shared on a key, order does not matter), owner and
// effective TTL.
func leaseFingerprint(keys []abi.ResourceKey, owner string, ttl time.Duration) string {
	modes := map[string]abi.LockMode{}
	for _, k := range keys {
		id := strconv.Quote(k.Domain) + strconv.Quote(k.Key)
		if m, ok := modes[id]; !ok || k.Mode > m {
			modes[id] = k.Mode
		}
	}
	parts := make([]string, 0, len(modes)+2)
	for id, m := range modes {
		parts = append(parts, id+m.String())
	}
	sort.Strings(parts)
	parts = append(parts, strconv.Quote(owner), ttl.String())
	return strings.Join(parts, "|")
}

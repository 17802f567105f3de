package wasm

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/tetratelabs/wazero/api"

	"github.com/hostd-dev/hostd/runtime/catalog"
	"github.com/hostd-dev/hostd/sdk/abi"
)

// Locks is the lease-lock service behind the lock_* and fence host
// functions (builtin/locks, adapted by host). Errors should wrap
// ErrLocked, ErrNotHolder, ErrExpired or ErrInvalidKey where they apply, so
// guests get stable statuses; anything else reaches the guest as
// "invalid" (wrapping ErrInvalidLockArg) or "unavailable".
//
// Every call names the calling plugin, and the service must scope it to
// that plugin's own grants: an idempotent acquire returns only a grant the
// same plugin took, and renew, release and fence checks of a grant the
// plugin did not take fail with ErrNotHolder (as for an unknown grant),
// whatever token or fence the guest presents. A plugin never sees or acts
// on another principal's grant (docs/security.md).
type Locks interface {
	// Acquire takes every key or none, without waiting.
	Acquire(ctx context.Context, req LeaseRequest) (abi.Lease, error)
	// Renew extends plugin's live grant (ttl 0 = its current TTL).
	Renew(ctx context.Context, plugin, id, token string, ttl time.Duration) (abi.Lease, error)
	// Release gives plugin's grant up; a wrong token is ErrNotHolder.
	Release(ctx context.Context, plugin, id, token string) error
	// CheckFence passes only for the current fence on key of a grant
	// plugin took.
	CheckFence(plugin string, key abi.ResourceKey, fence uint64) error
	// FenceCheck is CheckFence for fenced writes: a catalog.Check that
	// holds exactly while the fence is current, to commit with the write.
	FenceCheck(plugin string, key abi.ResourceKey, fence uint64) (catalog.Check, error)
}

// LeaseRequest is a plugin's acquire. Plugins never wait: a host call
// must not block while it holds a pool instance and the caller's worker.
type LeaseRequest struct {
	Keys []abi.ResourceKey
	TTL  time.Duration // 0 = the service's default
	// Owner is set by the host, never taken as is from the guest: the
	// plugin's name, or "<plugin>/<label>" when the guest gave a label
	// (see PluginOwner).
	Owner          string
	IdempotencyKey string
	Plugin         string // the calling plugin: the grant's principal
}

// PluginOwner is the owner a plugin's lease is recorded under: the
// plugin's name, or "<plugin>/<label>" for a label the guest chose, so a
// plugin can never pose as an operator or another plugin.
func PluginOwner(plugin, label string) string {
	if label == "" || label == plugin {
		return plugin
	}
	return plugin + "/" + label
}

// Lock errors the Locks adapter wraps, mapped to guest statuses.
var (
	ErrLocked         = errors.New("wasm: locked")
	ErrNotHolder      = errors.New("wasm: not holder")
	ErrExpired        = errors.New("wasm: lease expired")
	ErrInvalidKey     = errors.New("wasm: invalid lock key")
	ErrInvalidLockArg = errors.New("wasm: invalid lock request")
)

func lockStatus(err error) abi.Status {
	switch {
	case errors.Is(err, ErrLocked):
		return abi.StatusLocked
	case errors.Is(err, ErrNotHolder):
		return abi.StatusNotHolder
	case errors.Is(err, ErrExpired):
		return abi.StatusExpired
	case errors.Is(err, ErrInvalidKey):
		return abi.StatusInvalidKey
	case errors.Is(err, ErrInvalidLockArg):
		return abi.StatusInvalid
	}
	return abi.StatusUnavailable
}

// lockState checks that a lock host call may run now; ackOnly calls
// (acquire, renew, release, fenced put) need an ack callback.
func lockState(ctx context.Context, cs *callState, what string, ackOnly bool) (Locks, uint64, bool) {
	if cs == nil {
		return nil, api.EncodeI64(-int64(abi.StatusNoContext)), false
	}
	if cs.kv == nil {
		return nil, cs.fail(abi.StatusNoContext, what+" is not available during initialization"), false
	}
	if ackOnly && cs.kind != abi.KindAck {
		return nil, cs.fail(abi.StatusReadOnly, fmt.Sprintf("%s is only allowed in ack callbacks (a %s is read-only: it may only check fences)", what, cs.kind)), false
	}
	if err := ctx.Err(); err != nil {
		return nil, cs.fail(abi.StatusUnavailable, err.Error()), false
	}
	l := cs.v.rt.cfg.Locks
	if l == nil {
		return nil, cs.fail(abi.StatusUnavailable, "lease locks are not configured in this hostd"), false
	}
	return l, 0, true
}

// readStr reads a guest string of at most max bytes.
func readStr(mod api.Module, ptr, n uint64, max uint32) (string, bool) {
	if api.DecodeU32(n) > max {
		return "", false
	}
	b, ok := read(mod, api.DecodeU32(ptr), api.DecodeU32(n))
	return string(b), ok
}

// readLockKey reads (domain, key) and validates their lengths.
func readLockKey(mod api.Module, stack []uint64) (abi.ResourceKey, bool) {
	d, ok1 := readStr(mod, stack[0], stack[1], abi.MaxKeyLen)
	k, ok2 := readStr(mod, stack[2], stack[3], abi.MaxKeyLen)
	if !ok1 || !ok2 || d == "" || k == "" {
		return abi.ResourceKey{}, false
	}
	return abi.ResourceKey{Domain: d, Key: k, Mode: abi.Exclusive}, true
}

func hostLockAcquire(ctx context.Context, mod api.Module, stack []uint64) {
	cs := stateOf(ctx)
	l, r, ok := lockState(ctx, cs, "lock_acquire", true)
	if !ok {
		stack[0] = r
		return
	}
	if api.DecodeU32(stack[1]) > 1<<20 {
		stack[0] = cs.fail(abi.StatusInvalid, "lock_acquire: request over 1 MiB")
		return
	}
	b, okb := read(mod, api.DecodeU32(stack[0]), api.DecodeU32(stack[1]))
	if !okb {
		stack[0] = cs.fail(abi.StatusInvalid, "lock_acquire: request out of bounds")
		return
	}
	q, err := abi.DecodeLeaseRequest(b)
	if err != nil {
		stack[0] = cs.fail(abi.StatusInvalidKey, "lock_acquire: "+err.Error())
		return
	}
	if len(q.Keys) == 0 || len(q.Keys) > abi.MaxLeaseKeys {
		stack[0] = cs.fail(abi.StatusInvalidKey, fmt.Sprintf("lock_acquire: 1..%d keys, got %d", abi.MaxLeaseKeys, len(q.Keys)))
		return
	}
	if q.TTLMillis > uint64(time.Duration(1<<62)/time.Millisecond) {
		stack[0] = cs.fail(abi.StatusInvalid, "lock_acquire: ttl out of range")
		return
	}
	lease, err := l.Acquire(ctx, LeaseRequest{Keys: q.Keys, TTL: time.Duration(q.TTLMillis) * time.Millisecond,
		Owner: PluginOwner(cs.v.name, q.Owner), IdempotencyKey: q.IdempotencyKey, Plugin: cs.v.name})
	if err != nil {
		stack[0] = cs.fail(lockStatus(err), err.Error())
		return
	}
	stack[0] = cs.ok(abi.AppendLease(nil, &lease))
}

// readGrant reads (id, token) from stack[0:4].
func readGrant(mod api.Module, stack []uint64) (id, token string, ok bool) {
	id, ok1 := readStr(mod, stack[0], stack[1], 256)
	token, ok2 := readStr(mod, stack[2], stack[3], 1024)
	return id, token, ok1 && ok2 && id != ""
}

func hostLockRenew(ctx context.Context, mod api.Module, stack []uint64) {
	cs := stateOf(ctx)
	l, r, ok := lockState(ctx, cs, "lock_renew", true)
	if !ok {
		stack[0] = r
		return
	}
	id, token, okg := readGrant(mod, stack)
	ttl := int64(stack[4])
	if !okg || ttl < 0 || ttl > int64(time.Duration(1<<62)/time.Millisecond) {
		stack[0] = cs.fail(abi.StatusInvalid, "lock_renew: id (1..256 bytes), token and ttl_ms >= 0 required, in bounds")
		return
	}
	lease, err := l.Renew(ctx, cs.v.name, id, token, time.Duration(ttl)*time.Millisecond)
	if err != nil {
		stack[0] = cs.fail(lockStatus(err), err.Error())
		return
	}
	stack[0] = cs.ok(abi.AppendLease(nil, &lease))
}

func hostLockRelease(ctx context.Context, mod api.Module, stack []uint64) {
	cs := stateOf(ctx)
	l, r, ok := lockState(ctx, cs, "lock_release", true)
	if !ok {
		stack[0] = r
		return
	}
	id, token, okg := readGrant(mod, stack)
	if !okg {
		stack[0] = cs.fail(abi.StatusInvalid, "lock_release: id (1..256 bytes) and token required, in bounds")
		return
	}
	if err := l.Release(ctx, cs.v.name, id, token); err != nil {
		stack[0] = cs.fail(lockStatus(err), err.Error())
		return
	}
	stack[0] = cs.ok(nil)
}

func hostFenceCheck(ctx context.Context, mod api.Module, stack []uint64) {
	cs := stateOf(ctx)
	l, r, ok := lockState(ctx, cs, "fence_check", false)
	if !ok {
		stack[0] = r
		return
	}
	key, okk := readLockKey(mod, stack)
	if !okk {
		stack[0] = cs.fail(abi.StatusInvalidKey, fmt.Sprintf("fence_check: domain and key must be 1..%d bytes, in bounds", abi.MaxKeyLen))
		return
	}
	if err := l.CheckFence(cs.v.name, key, stack[4]); err != nil {
		stack[0] = cs.fail(lockStatus(err), err.Error())
		return
	}
	stack[0] = cs.ok(nil)
}

// hostKVPutFenced stages a KV put that commits only while fence is still
// the current fence on the lock key of a grant this plugin took: the fence is checked now (a
// stale one fails at once with not_holder) and its catalog.Check is added
// to the callback's Checks, so the commit re-checks it in the same
// transaction.
func hostKVPutFenced(ctx context.Context, mod api.Module, stack []uint64) {
	cs := stateOf(ctx)
	l, r, ok := lockState(ctx, cs, "kv_put_fenced", true)
	if !ok {
		stack[0] = r
		return
	}
	key, r, ok := kvArgs(ctx, mod, stack, cs)
	if !ok {
		stack[0] = r
		return
	}
	val, r, ok := kvValue(mod, stack, cs)
	if !ok {
		stack[0] = r
		return
	}
	lk, okk := readLockKey(mod, stack[4:8])
	if !okk {
		stack[0] = cs.fail(abi.StatusInvalidKey, fmt.Sprintf("kv_put_fenced: lock domain and key must be 1..%d bytes, in bounds", abi.MaxKeyLen))
		return
	}
	check, err := l.FenceCheck(cs.v.name, lk, stack[8])
	if err != nil {
		stack[0] = cs.fail(lockStatus(err), err.Error())
		return
	}
	if err := cs.kv.put(ctx, key, val, false); err != nil {
		stack[0] = cs.fail(statusOf(err), err.Error())
		return
	}
	cs.kv.addFence(check)
	stack[0] = cs.ok(nil)
}

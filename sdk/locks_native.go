//go:build !wasip1

package sdk

import (
	"time"

	"github.com/hostd-dev/hostd/sdk/abi"
)

// LockBackend is the optional part of a Backend that serves lease locks
// and fences in a native build (sdk/sdktest implements it). Errors should
// be *HostError with the lease statuses (abi.StatusLocked, ...).
type LockBackend interface {
	LockAcquire(req abi.LeaseRequest) (abi.Lease, error)
	LockRenew(id, token string, ttl time.Duration) (abi.Lease, error)
	LockRelease(id, token string) error
	FenceCheck(key abi.ResourceKey, fence uint64) error
	KVPutFenced(key string, value []byte, lockKey abi.ResourceKey, fence uint64) error
}

func lockBackend() (LockBackend, error) {
	b := current()
	if b == nil {
		return nil, ErrNoBackend
	}
	lb, ok := b.(LockBackend)
	if !ok {
		return nil, &HostError{abi.StatusUnavailable, "the installed backend does not serve lease locks"}
	}
	return lb, nil
}

func hostLockAcquire(q abi.LeaseRequest) (Lease, error) {
	lb, err := lockBackend()
	if err != nil {
		return Lease{}, err
	}
	l, err := lb.LockAcquire(q)
	if err != nil {
		return Lease{}, err
	}
	return leaseFrom(l), nil
}

func hostLockRenew(id, token string, ttl time.Duration) (Lease, error) {
	lb, err := lockBackend()
	if err != nil {
		return Lease{}, err
	}
	l, err := lb.LockRenew(id, token, ttl.Truncate(time.Millisecond))
	if err != nil {
		return Lease{}, err
	}
	return leaseFrom(l), nil
}

func hostLockRelease(id, token string) error {
	lb, err := lockBackend()
	if err != nil {
		return err
	}
	return lb.LockRelease(id, token)
}

func hostFenceCheck(k abi.ResourceKey, fence uint64) error {
	lb, err := lockBackend()
	if err != nil {
		return err
	}
	return lb.FenceCheck(k, fence)
}

func hostKVPutFenced(key string, value []byte, k abi.ResourceKey, fence uint64) error {
	lb, err := lockBackend()
	if err != nil {
		return err
	}
	return lb.KVPutFenced(key, value, k, fence)
}

//go:build wasip1

package sdk

import (
	"time"
	"unsafe"

	"github.com/hostd-dev/hostd/sdk/abi"
)

//go:wasmimport hostd lock_acquire
func importLockAcquire(reqPtr unsafe.Pointer, reqLen uint32) int64

//go:wasmimport hostd lock_renew
func importLockRenew(idPtr unsafe.Pointer, idLen uint32, tokPtr unsafe.Pointer, tokLen uint32, ttlMillis int64) int64

//go:wasmimport hostd lock_release
func importLockRelease(idPtr unsafe.Pointer, idLen uint32, tokPtr unsafe.Pointer, tokLen uint32) int64

//go:wasmimport hostd fence_check
func importFenceCheck(domPtr unsafe.Pointer, domLen uint32, keyPtr unsafe.Pointer, keyLen uint32, fence uint64) int64

//go:wasmimport hostd kv_put_fenced
func importKVPutFenced(keyPtr unsafe.Pointer, keyLen uint32, valPtr unsafe.Pointer, valLen uint32,
	domPtr unsafe.Pointer, domLen uint32, lkeyPtr unsafe.Pointer, lkeyLen uint32, fence uint64) int64

func leaseResult(r int64) (Lease, error) {
	b, err := result(r)
	if err != nil {
		return Lease{}, err
	}
	l, err := abi.DecodeLease(b)
	if err != nil {
		return Lease{}, &HostError{abi.StatusUnavailable, err.Error()}
	}
	return leaseFrom(l), nil
}

func hostLockAcquire(q abi.LeaseRequest) (Lease, error) {
	b := abi.AppendLeaseRequest(nil, &q)
	return leaseResult(importLockAcquire(bytesPtr(b), uint32(len(b))))
}

func hostLockRenew(id, token string, ttl time.Duration) (Lease, error) {
	return leaseResult(importLockRenew(strPtr(id), uint32(len(id)), strPtr(token), uint32(len(token)), int64(ttl/time.Millisecond)))
}

func hostLockRelease(id, token string) error {
	_, err := result(importLockRelease(strPtr(id), uint32(len(id)), strPtr(token), uint32(len(token))))
	return err
}

func hostFenceCheck(k abi.ResourceKey, fence uint64) error {
	_, err := result(importFenceCheck(strPtr(k.Domain), uint32(len(k.Domain)), strPtr(k.Key), uint32(len(k.Key)), fence))
	return err
}

func hostKVPutFenced(key string, value []byte, k abi.ResourceKey, fence uint64) error {
	_, err := result(importKVPutFenced(strPtr(key), uint32(len(key)), bytesPtr(value), uint32(len(value)),
		strPtr(k.Domain), uint32(len(k.Domain)), strPtr(k.Key), uint32(len(k.Key)), fence))
	return err
}

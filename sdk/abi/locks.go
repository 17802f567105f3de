package abi

import "fmt"

// Lease-lock host functions (ABI v1, added with the lease-lock service).
// They are optional imports: a module that does not import them loads as
// before. Signatures:
//
//	lock_acquire(req_ptr i32, req_len i32) -> i64                       // LeaseRequest in, Lease pending
//	lock_renew(id_ptr i32, id_len i32, token_ptr i32, token_len i32, ttl_ms i64) -> i64 // Lease pending
//	lock_release(id_ptr i32, id_len i32, token_ptr i32, token_len i32) -> i64
//	fence_check(domain_ptr i32, domain_len i32, key_ptr i32, key_len i32, fence i64) -> i64
//	kv_put_fenced(key_ptr i32, key_len i32, val_ptr i32, val_len i32,
//	              domain_ptr i32, domain_len i32, lkey_ptr i32, lkey_len i32, fence i64) -> i64
//
// All follow the i64 result convention. lock_acquire, lock_renew,
// lock_release and kv_put_fenced are allowed in ack callbacks only
// (elsewhere: StatusReadOnly); fence_check in every handler kind.
// docs/plugin-abi.md describes each one.
const (
	FnLockAcquire = "lock_acquire"
	FnLockRenew   = "lock_renew"
	FnLockRelease = "lock_release"
	FnFenceCheck  = "fence_check"
	FnKVPutFenced = "kv_put_fenced"
)

// Statuses of the lease-lock host functions (continuing Status).
const (
	// StatusLocked: lock_acquire found a conflicting holder (the message
	// names the key and the holders' owners); nothing was acquired.
	StatusLocked Status = 7
	// StatusNotHolder: the token does not match, or the fence is not a
	// current holder's fence on that key (stale).
	StatusNotHolder Status = 8
	// StatusExpired: lock_renew of a grant whose TTL has passed.
	StatusExpired Status = 9
	// StatusInvalidKey: a lock key with an empty or oversized domain or
	// key, or a bad mode.
	StatusInvalidKey Status = 10
)

// Record types of the lease-lock envelopes.
const (
	RecLeaseRequest RecordType = 7
	RecLease        RecordType = 8
)

// MaxLeaseKeys is the most keys one lock_acquire may name.
const MaxLeaseKeys = 64

// LeaseRequest is the input of lock_acquire. Acquiring never waits: a
// conflict fails at once with StatusLocked.
type LeaseRequest struct {
	Keys []ResourceKey
	// TTLMillis is the lease's time to live (0 = the host's default).
	TTLMillis uint64
	// Owner names the holder in conflicts and listings ("" = the plugin's
	// name).
	Owner string
	// IdempotencyKey makes a retried acquire return the same grant while
	// it is held ("" = none).
	IdempotencyKey string
}

// FencedKey is one key of a lease with its fencing token.
type FencedKey struct {
	Key   ResourceKey
	Fence uint64
}

// Lease is the output of lock_acquire and lock_renew.
type Lease struct {
	ID    string
	Token string
	// TTLMillis is the granted TTL; ExpiresAt the wall-clock expiry in
	// Unix nanoseconds (for display: the host enforces TTLs on a
	// monotonic clock).
	TTLMillis uint64
	ExpiresAt int64
	Keys      []FencedKey
}

func appendKey(b []byte, k ResourceKey) []byte {
	b = appendStr(b, k.Domain)
	b = appendStr(b, k.Key)
	return append(b, byte(k.Mode))
}

// AppendLeaseRequest appends the envelope of q to b.
func AppendLeaseRequest(b []byte, q *LeaseRequest) []byte {
	b = header(b, RecLeaseRequest)
	b = appendU32(b, uint32(len(q.Keys)))
	for _, k := range q.Keys {
		b = appendKey(b, k)
	}
	b = appendU64(b, q.TTLMillis)
	b = appendStr(b, q.Owner)
	return appendStr(b, q.IdempotencyKey)
}

// AppendLease appends the envelope of l to b.
func AppendLease(b []byte, l *Lease) []byte {
	b = header(b, RecLease)
	b = appendStr(b, l.ID)
	b = appendStr(b, l.Token)
	b = appendU64(b, l.TTLMillis)
	b = appendU64(b, uint64(l.ExpiresAt))
	b = appendU32(b, uint32(len(l.Keys)))
	for _, k := range l.Keys {
		b = appendKey(b, k.Key)
		b = appendU64(b, k.Fence)
	}
	return b
}

func (r *reader) key(i int) ResourceKey {
	var k ResourceKey
	k.Domain = r.str("domain")
	k.Key = r.str("key")
	m := r.u8("mode")
	if r.err == nil && (m > byte(Exclusive) || k.Domain == "" || k.Key == "") {
		r.fail(fmt.Sprintf("lock key %d: empty domain/key or mode %d", i, m))
	}
	k.Mode = LockMode(m)
	return k
}

// DecodeLeaseRequest decodes a LeaseRequest envelope.
func DecodeLeaseRequest(b []byte) (LeaseRequest, error) {
	r := reader{b: b}
	r.header(RecLeaseRequest)
	var q LeaseRequest
	if n := r.count("lock keys", 9); n > 0 {
		q.Keys = make([]ResourceKey, n)
		for i := range q.Keys {
			q.Keys[i] = r.key(i)
		}
	}
	q.TTLMillis = r.u64("ttl_ms")
	q.Owner = r.str("owner")
	q.IdempotencyKey = r.str("idempotency_key")
	if err := r.end(); err != nil {
		return LeaseRequest{}, err
	}
	return q, nil
}

// DecodeLease decodes a Lease envelope.
func DecodeLease(b []byte) (Lease, error) {
	r := reader{b: b}
	r.header(RecLease)
	var l Lease
	l.ID = r.str("id")
	l.Token = r.str("token")
	l.TTLMillis = r.u64("ttl_ms")
	l.ExpiresAt = int64(r.u64("expires_at"))
	if n := r.count("lease keys", 17); n > 0 {
		l.Keys = make([]FencedKey, n)
		for i := range l.Keys {
			l.Keys[i].Key = r.key(i)
			l.Keys[i].Fence = r.u64("fence")
		}
	}
	if err := r.end(); err != nil {
		return Lease{}, err
	}
	return l, nil
}

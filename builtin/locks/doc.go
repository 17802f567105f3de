// Package locks is hostd's locking module: the in-process resource-key
// locker used by the broadcast engine, the durable lease-lock service with
// fencing (for operators, clients and plugins), presence ("who is looking
// at this"), and single-flight for in-process callers.
//
// The design is docs/design/locks.md (source: the BlueKing CMDB
// Locker/MLocker and cc_HostLock, seed 002, with the flaws that write-up
// lists fixed: unlock checks the owner's token, every grant carries a
// fencing token, leases are renewable, multi-key requests are canonically
// ordered and all-or-nothing, presence entries expire and can only be
// withdrawn by their holder).
//
// # Resource-key locker
//
// A resource key is an abi.ResourceKey {Domain, Key, Mode}. Canonicalize
// validates a request's keys, de-duplicates them (exclusive wins over
// shared on the same key) and sorts them by domain, then key.
//
//	l := locks.NewKeyLocker(locks.KeyLockerOptions{})
//	g, err := l.Lock(ctx, "broadcast-42", keys) // blocks until granted or ctx ends
//	...
//	g.Unlock() // idempotent
//
// TryLock never blocks: it returns a *ConflictError (errors.Is ErrLocked)
// naming the first conflicting key and who holds or awaits it.
//
// Implementation notes. One mutex guards the whole table; a request's keys
// are checked and taken in a single critical section, so there is no lock
// order between keys and opposite-order requests cannot deadlock. Waiters
// get increasing tickets; a request is granted when it is compatible with
// the holders of every key and no waiter with an earlier ticket wants one
// of its keys in a conflicting mode. That makes a queued writer block later
// readers (writers are not starved) and guarantees the earliest waiter is
// blocked by holders only, so the queue always makes progress. Per key,
// the state is the holder list and a FIFO of waiters; a key with neither
// is deleted, so memory returns to baseline when everything is released.
// Release and cancellation re-scan only the queues of the keys involved.
//
// Close fails all queued waiters with ErrClosed; holders keep their guards.
//
// # Lease locks
//
// Service is the durable lease-lock service (Open, Acquire, Renew,
// Release, CheckFence, FenceCheck, List, Inspect, ForceRelease, Audit).
// A grant has an id, a secret token (needed to renew and release), a fence
// and a TTL. Its key space is separate from the resource-key locker's.
//
//	g, err := svc.Acquire(ctx, locks.AcquireRequest{Owner: "deployer",
//		Keys: []abi.ResourceKey{{Domain: "service", Key: "api", Mode: abi.Exclusive}},
//		TTL: time.Minute, Wait: 10 * time.Second})
//	// pass g.Fence to the protected resource with every write
//	_, err = svc.Renew(ctx, g.ID, g.Token, 0)
//	err = svc.Release(ctx, g.ID, g.Token)
//
// Fencing. Fences (which are also the grant ids) come from the catalog
// sequence "locks.fence": strictly increasing, never reused, also across
// crashes. A protected resource keeps the highest fence it has seen per key
// and rejects lower ones. Inside hostd a write is fenced by adding the
// catalog.Check returned by FenceCheck to the write's Batch: the check is on
// the grant's record, which is deleted before the key can go to anyone
// else, so the commit fails with catalog.ErrConflict if the fence went stale
// after it was checked.
//
// Durability. A grant is committed (fsynced) before Acquire returns, a
// renewal before Renew returns, and a release/eviction/expiry deletes the
// record before the keys are handed on, so the catalog never holds two
// conflicting grants. Concurrent acquires commit concurrently and share the
// catalog committer's rounds. TTLs run on the clock's monotonic reading;
// the wall-clock expiry is persisted for display and for the restart rule:
// at Open, a grant whose persisted expiry has passed is deleted, and every
// other grant gets its full TTL again from boot (persisted at once), so a
// restart never shortens a grant and lengthens it by at most one TTL.
//
// Deterministic core. lease_table.go holds keys, grants, waiters and the
// expiry heap with no I/O, goroutines or clock; lease_service.go is the
// shell that reads the clock, does the catalog I/O and runs the expiry
// loop. Grant states: pending (being persisted; holds its keys) -> live ->
// leaving (record being deleted; still holds its keys) -> removed.
// Fairness and deadlock freedom are as in the resource-key locker.
//
// Principals. Every grant records the principal that took it
// (AcquireRequest.Principal: TokenPrincipal for an API token,
// PrincipalAnonymous when auth is off, PluginPrincipal for a plugin,
// PrincipalInProcess when none is given) — set by the host, never by the
// caller's body. Idempotency entries are keyed by (principal, key), so an
// acquire that repeats another principal's keys, owner and idempotency
// key never gets that grant back. Each entry keeps a fingerprint of its
// request (owner, canonical keys with modes, effective TTL, meta; see
// fingerprint): the same key with a different request is an
// *IdempotencyConflictError (conflict) naming the original grant.
// Records written before principals existed load as before but their
// idempotency keys match nothing; records with a principal and no
// fingerprint match on the key alone. RenewAs, ReleaseAs, FenceCheckAs
// and CheckFenceAs act only on the given principal's grants (a grant of
// another principal is not_holder, like an unknown one): the host uses
// them for plugins and fenced API writes. Renew and Release check the
// token only (the token is the capability).
//
// TTL rule (CheckTTL), for Acquire, Renew and Announce alike: 0 means the
// default (Renew: the grant's current TTL); otherwise MinTTL (1ms) up to
// the maximum, else a *FieldError for "ttl" wrapping ErrInvalid or
// ErrTTLTooLong.
//
// Errors map to stable API codes with ErrorCode: locked (a
// *LeaseConflictError with the holders' owner and meta, never tokens),
// not_holder, expired, ttl_too_long, invalid_key, canceled,
// invalid_argument, conflict, not_found, unavailable.
//
// # Presence and single-flight
//
// Presence (Announce, Withdraw, Who) is the in-memory "who is looking at
// this" table: many holders per key, entries expire without a heartbeat,
// an entry is refreshed or withdrawn only with the token its first announce
// returned. It never blocks lease locks or is blocked by them.
//
// Flight[T].Do runs one function per key for concurrent in-process callers
// and shares the result; an error or panic (returned as *PanicError) ends
// the flight so the next call runs again.
package locks

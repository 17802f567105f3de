// Package locks is hostd's locking module: the in-process resource-key
// locker used by the broadcast engine, the durable lease-lock service with
// fencing (for operators, clients and plugins), presence ("who is looking
// at this"), and single-flight for in-process callers.
//
// The design is ../../shared/design/locks.md (source: the BlueKing CMDB
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
package locks

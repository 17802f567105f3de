// Package broadcast is hostd's broadcast engine: one message, atomically and
// idempotently, to a set of vchannels (always including the control channel
// "_control/0"), with an ack callback per message type that runs exactly
// once in effect. The behaviour is specified in docs/design/broadcast.md
// (after the Milvus Broadcaster); this page says how the code implements
// it.
//
// # Using it
//
//	e, err := broadcast.New(broadcast.Options{Store: st, Locker: lk, Channels: ch, Handlers: plugins, ...})
//	e.Register("Noop", broadcast.Noop{}, broadcast.TypeOptions{}) // built-ins, before Start
//	err = e.Start(ctx)        // recovery: re-takes locks, resumes appends and callbacks
//	res, err := e.Submit(ctx, &broadcast.Request{...})
//	e.Close()
//
// The engine never imports another builtin or host: it declares what it
// needs as small interfaces (Locker, Channels, HandlerSource) and the host
// adapts builtin/locks, runtime/wal (or builtin/mapping) and runtime/wasm.
//
// # Message types and handlers
//
// Every message type is served by one Handler:
//
//	ResourceKeys(ctx, msg)         keys the type itself declares; merged with the caller's
//	Validate(ctx, msg, kv)         optional check under the locks, before anything is persisted;
//	                               kv is a read-only snapshot of the catalog
//	Ack(ctx, call) (AckResult, err) the ack callback, run after every vchannel is acked
//
// Built-in types (Noop here; topic.create/grow/remap/delete from the host's
// mapping wiring) are registered with Engine.Register before Start. Plugin
// types are found through Options.Handlers (a HandlerSource: the host adapts
// runtime/wasm to it); a built-in wins over a plugin type of the same name.
// A type nobody serves is rejected with ErrUnknownType unless
// Options.AllowUnhandled is set, in which case it is broadcast with no
// callback.
//
// Per-type options (TypeOptions): MaxAttempts (0 = unlimited) and AckSyncUp
// (the default of the per-request flag).
//
// Errors from a handler are retryable unless wrapped with Permanent (tested
// with IsPermanent). A permanent Ack error, or reaching MaxAttempts, moves
// the task to FAILED: locks released, error kept, still indexed for
// idempotency. A permanent or any Validate error is returned to the caller.
//
// # Exactly-once plugin state
//
// Ack does not write anything itself. It returns an AckResult: the Ops
// (catalog puts/deletes, under the plugin's own pkv/ namespace) it wants
// applied, plus the optimistic Checks and RangeChecks of what it read. The
// engine commits those in the same catalog.Batch that writes the task's
// TOMBSTONE record. If a check fails (catalog.ErrConflict) nothing is
// applied, the callback is re-run at once; that re-run is not an attempt
// (it does not count toward MaxAttempts) but gets its own span and bumps
// the conflict counter. A crash before that commit leaves no trace of the
// attempt; a crash after it is a finished task.
//
// # Sizes: nothing is promised that cannot be stored
//
// Before anything else (reservation, lock, ID), Submit sizes the task
// record at its worst case — the request's base64 payload, properties,
// every resource key (the type's and the cluster key included),
// vchannels, idempotency key and scope, plus every field the engine may
// add later at its largest (size.go; the kept error and abandon notes are
// clipped when stored so their worst case is known) — against the
// catalog's value limit (Options.MaxRecordBytes, from catalog.Limiter),
// and the message with its headers against one WAL record
// (Options.MaxMessageBytes). What can never fit is refused with a
// *TooLargeError (ErrTooLarge; HTTP 413 naming the limit). New refuses
// options whose MaxPayload can never fit (CheckLimits; the host's config
// validation runs the same check). Should the PENDING commit still fail
// for good (catalog.ErrTooLarge or ErrInvalid), the task is dropped: its
// keys and idempotency reservation are released, nothing is appended and
// the caller gets the error, never an ID. A wait that ends before the
// PENDING commit returns no ID either. A callback whose writes can never
// be committed ends the task FAILED (permanent), never a retry loop.
//
// # The nine steps (Engine.Submit and the task driver)
//
//  1. Idempotency (before the locks, so a retry never waits behind
//     locks — its original's or anyone's): lookup and reservation of
//     (type, scope, key) in one critical section. A hit compares the
//     request's fingerprint (sha256 of type, payload, properties and
//     sorted vchannels, persisted with the task) with the original's:
//     equal, or an original persisted before fingerprints existed → wait
//     for the original (its ID, state, appends, duplicate=true); different
//     → *IdempotencyConflictError naming the original (HTTP 409). A
//     reservation held by a concurrent request: wait for it to resolve,
//     then look again (a dropped or rejected first request frees it).
//  2. Lock: caller keys ∪ type keys (+ shared cluster key unless a cluster
//     key is present) are locked through Locker, blocking on ctx; a
//     failure releases the reservation.
//  3. Validate under the locks (only for a non-duplicate).
//  4. Persist: the ID comes from the persisted sequence "broadcast/id"
//     (allocated in blocks, after the lock), the task is committed as PENDING
//     with the W3C carrier of its `create broadcast` span. When Channels
//     is an AtomicAppender (ResolverChannels over the mapping or
//     wal.Direct), the PENDING record is committed in the same catalog
//     transaction as the task's first appends — persist and append are
//     one durable write, and an append never exists without its task.
//     When that combined commit fails (say one vchannel is sealed or
//     missing) the record is committed on its own first, then the appends
//     go on per vchannel. WaitPersisted returns after that commit.
//  5. Append: one append loop batches the entries of every task into one
//     Channels.Append call per round; ResolverChannels turns a round into
//     one atomic multi-vchannel commit (wal.MultiAppender). Failed vchannels are retried per
//     vchannel with backoff 10 ms ×2 capped at 10 s, forever. Checkpoints
//     (logic offset, physical queue, time tick, attempts) are committed
//     with the task's next write: with the TOMBSTONE for FastAck (one
//     commit less per broadcast), right after the appends for AckSyncUp,
//     with the attempt record when a callback fails.
//  6. Ack: FastAck is implicit (a checkpoint of a FastAck task is its ack);
//     with AckSyncUp every vchannel except the control channel needs an
//     explicit Ack, persisted as its own record.
//  7. Callback: when every vchannel is acked. Conflicting tasks can never be
//     PENDING at the same time (the locks are held from step 1 to step 8,
//     also across restarts), so their callbacks are ordered by the control
//     channel; at recovery tasks are resumed in control-channel time-tick
//     order. Failed callbacks retry with backoff 10 ms ×2 capped at 10 s.
//     A callback runs under its task driver's context — cancelled by
//     Abandon (cause errAbandoned) and by Close (errShuttingDown) — with
//     its span (child of the persisted trace context) attached, so an
//     abandon or a shutdown interrupts a waiting or running call at once
//     (runtime/wasm's watchdog stops a guest when the context ends); the
//     attempt's span then carries hostd.interrupted = "abandoned" or
//     "shutting down" and hostd.broadcast.callback.interrupted counts it.
//  8. Tombstone: the TOMBSTONE record (with its completion time) and the
//     callback's ops commit together; locks are released, waiters woken.
//  9. GC: finished tasks older than MaxLifetime or beyond MaxCount (oldest
//     first) are deleted, every CheckInterval and at Start. At 1,000
//     broadcasts/s the default MaxCount of 8192 makes the idempotency
//     window about 8 s, not 24 h.
//
// # Lock visibility
//
// Engine.Locks is the operator's view of the resource keys (GET
// /v1/broadcast-locks, `hostd broadcast locks`): holders are the PENDING
// tasks keeping a guard (by broadcast ID), waiters the Locker.Lock calls
// in progress (registered around each call in Submit and Retry), each
// marked on the key it waits for — the first of its keys held in a
// conflicting mode, else the first wanted by an earlier waiter. A Submit
// whose lock wait ends returns a *LockWaitError naming that key and its
// holders (HTTP 504 with details.waiting_for and details.holders).
//
// # Durable records (namespace catalog.NSBroadcast = "bc/")
//
//	bc/t/<id:016x>              task record (JSON, taskRecord)
//	bc/c/<id:016x>/<vchannel>   append checkpoint (logic offset, physical queue, time tick, attempts)
//	bc/a/<id:016x>/<vchannel>   explicit ack (AckSyncUp)
//
// Nothing is appended twice: before the PENDING commit the engine reads
// a lower bound of each target vchannel's next offset (Channels.Next, from
// memory) and persists it with the task (LowWater), so every append of
// the task lands at or above it. After a
// crash, a PENDING task's vchannel without a checkpoint is read back from
// that mark and matched on the hostd.broadcast.id (and epoch) header of
// records of hostd's own kinds only (wal.KindBroadcast/KindMarker, which
// ResolverChannels writes and no client append can: a client's record is
// wal.KindData, and the hostd. property namespace is refused in data);
// legacy, kind-less records count only for tasks created before record
// kinds (taskRecord.Kinds unset). Found entries become checkpoints before
// anything is appended. An admin retry runs the same search first.
//
// # Locking
//
// Engine.mu guards the task table, the idempotency index and lockWaits; task.mu guards
// one task's in-memory state; Engine.gcMu serializes GC with admin retries
// (so a task is never deleted while it becomes PENDING again). Order:
// gcMu, then Engine.mu, then task.mu. Only gcMu is held across a catalog
// Commit; no lock is held across a Channels call or a handler call.
//
// # Tracing
//
// See tracing.md. `create broadcast` (PRODUCER) is a child of the caller's
// span; its context is persisted and it ends right after the PENDING commit
// (so the first `send` spans, whose commit persists the task, overlap it).
// Each append attempt is a `send <vchannel>` CLIENT span and each callback
// attempt a `process broadcast` CONSUMER span, children of the persisted
// context, with hostd.attempt persisted and continued across restarts.
// Every start creates a `hostd.recover` root with one link per recovered
// task, and recovered attempt spans carry hostd.recovered=true.
//
// # Failpoints (runtime/failpoint)
//
//	broadcast.after-persist       after the PENDING commit
//	broadcast.mid-append          after a round's appends, before any of its checkpoints commit
//	broadcast.after-acks          when a task is fully acked, before its callback
//	broadcast.mid-callback        after a callback returned, before its commit
//	broadcast.before-tombstone    just before the TOMBSTONE commit
//	broadcast.after-tombstone     just after the TOMBSTONE commit
package broadcast

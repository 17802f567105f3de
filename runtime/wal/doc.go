// Package wal implements physical queues: append-only logs stored in the
// catalog under the "wal/" namespace.
//
// A physical queue has offsets assigned by the log from 0; every entry
// carries a time tick, a payload and string properties. Ticks are hybrid
// timestamps (Unix nanoseconds, bumped to stay unique): they strictly
// increase across every queue of the process and across restarts (Open
// seeds the clock above the largest tick persisted), so the broadcast
// engine can order ack callbacks by the control channel's ticks, and the
// mapping can use them as message times.
//
// # Usage
//
//	w, _ := wal.Open(ctx, wal.Config{Store: db, Queues: []string{wal.ControlChannel}})
//	ents, err := w.Append(ctx, "q", []wal.Record{{Payload: p}})
//	got, err := w.Read(ctx, "q", 0, 100)
//	err = w.Wait(ctx, "q", nextOffset) // long-poll: returns once Max > nextOffset
//	w.Trim(ctx, "q", upTo)              // retention
//
// Resolver is what the broadcast engine and consumers use: a vchannel (logic
// queue) resolves to a physical queue. NewDirect is the 1:1 resolver;
// builtin/mapping implements the real one (topic/N → leader segment), and
// it uses CreateOps and SealOps to create and close physical queues in the
// same catalog transaction as a mapping change.
//
// # Group commit
//
// Badger syncs once per transaction, so appends to one queue are grouped:
// the first caller to find the queue idle becomes its leader and commits
// every call queued while its previous commit ran (whole calls, within
// MaxBatchRecords/MaxBatchBytes) as one catalog batch; when its own call is
// done it hands leadership to the oldest waiting caller. No goroutine is
// started. Offsets are assigned from the cached end offset when the batch
// is formed, and the commit checks the queue's meta record version: if the
// commit fails nothing is assigned (the cache is dropped and reloaded), so
// the offset sequence stays gap-free and duplicate-free. A seal or delete
// written by someone else makes that check fail, and the appender then
// reports ErrSealed / ErrNoQueue.
//
// # Records
//
//	wal/m/<queue>                 meta: next offset, last tick, bytes, state
//	wal/n/<queue>                 first retained offset (moved by Trim)
//	wal/e/<queue>\x00<offset BE8> entry: kind, tick, cumulative bytes, props, payload
//
// # Record kinds
//
// Every entry carries a Kind in the record itself (entry format version
// 2): KindData for what clients append, KindBroadcast and KindMarker for
// what hostd writes (broadcast messages; markers such as the remap marker).
// A Record's zero Kind is data, and an append of a data record carrying a
// property in the reserved "hostd." namespace fails with a
// *ReservedPropertyError, so no write path can make a record look like
// hostd's: recovery and consumers recognize hostd's records by kind, never
// by properties. Entries written before kinds existed (version 1) decode
// as KindLegacy; nothing writes that kind.
//
// Trim writes only wal/n and entry deletions, so it never conflicts with
// appends. Delete marks the meta "deleting" first; Open finishes an
// interrupted delete.
//
// # Group commit
//
// Every append — Append, AppendWith, or AppendMulti over several queues —
// queues one request. One caller at a time leads: it takes everything
// queued (within MaxBatchRecords/MaxBatchBytes), assigns offsets and
// ticks per queue from the cached meta, and commits it all as one catalog
// batch with one version check per queue meta. No timers: a lone writer
// commits at once; whatever queues meanwhile goes into the next round. A
// request naming a missing or sealed queue fails alone before the commit;
// a failed commit fails every request in it and assigns nothing. So a
// broadcast to N vchannels is one catalog commit, not N.
//
// Locking: WAL.mu guards the queue table; WAL.amu guards the committer's
// pending list and leadership; queue.mu guards a queue's cache and
// notifier. No two of them are held at once and none is held across a
// catalog call. queue.trimMu serializes Trim and Delete of one queue.
package wal

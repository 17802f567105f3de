// Package jswal keeps hostd's physical queues on NATS JetStream: a
// wal.Log whose queues survive the loss of a machine (with replicated
// streams) and live on infrastructure operators already run. It is the
// only package that imports the NATS client (internal/layers).
//
// # Usage
//
//	l, err := jswal.Open(ctx, jswal.Options{URL: "nats://n1:4222", Replicas: 3, Term: term})
//	var pe *jswal.PayloadError // the server's max_payload is too small
//	err = l.Create(ctx, "orders/0")
//	err = l.Fence(ctx, "orders/0", term)           // on taking office, per queue
//	ents, err := l.Append(ctx, "orders/0", recs)   // *FencedError once a newer term took over
//	ents, err = wal.AppendOnce(ctx, l, "orders/0", low, recs) // after an unknown outcome
//
// # Mapping
//
// One stream per physical queue (docs/jetstream-wal.md has the
// measurement behind the choice and its limit): stream
// <prefix>_<readable part of the name>_<hash>, two subjects — data
// <prefix>.q.<hash> and fences <prefix>.f.<hash> — and the queue's name in
// the stream's metadata (hostd_queue). Offset = stream sequence - 1:
// dense, never renumbered; Trim purges a prefix, so Min moves and Max
// stays.
//
// # Fenced, deduplicated appends
//
// Every data publish carries Nats-Expected-Last-Sequence = the tail this
// writer knows, so of two writers only one extends a queue; every record
// carries Hostd-Term (the writer's term), Hostd-Producer and
// Hostd-Producer-Seq, and Record.ID as Nats-Msg-Id. A writer with a term
// fences a queue before its first append there (and Fence does it on
// demand): a fence record at its term on the fence subject, expecting the
// last fence's sequence there (Nats-Expected-Last-Subject-Sequence), after
// checking that the last fence's term is not newer. Fences are ordered
// against each other only — a writer that keeps appending cannot keep a
// fence out — and every fence moves the stream's last sequence, so an
// older writer's next data append fails on the sequence; it then reads
// the last fence, finds a newer term and returns a *FencedError without
// appending. Reads skip fence records (each takes an offset: reads may
// show gaps). Trim carries the last fence forward (a copy) before purging
// past it, so the fence's term survives retention. Seal is a fence-subject
// record that no append may follow.
//
// A publish that times out is retried with the same Msg-Id and expected
// sequence; if the retry meets a wrong sequence, the message at the
// expected position is read, and if it is this writer's (same producer id
// and sequence) the first attempt was stored. Otherwise Append returns
// ErrUnknownOutcome and the caller reconciles with wal.AppendOnce from its
// persisted low-water offset (a scan by Record.ID, independent of
// JetStream's duplicate window).
//
// A batch is not atomic on JetStream: its records are published one after
// the other; a failure leaves a prefix stored (the error says which).
//
// Locking: Log.mu guards the queue table and cached stream handles;
// qstate.mu serializes one queue's appends, fences and trims in the
// process and is held across JetStream requests; tmu guards the tick
// clock. Log.mu and tmu are never held across a request.
package jswal

package wal

import (
	"context"
	"errors"
	"fmt"
)

// Log is a set of physical queues on some backend: the embedded WAL on
// the catalog (*WAL) or JetStream (runtime/wal/jswal). It is what the
// broadcast engine and the mapping need from physical queues, minus what
// only the catalog can do (appends atomic across queues with catalog
// writes, CreateOps/SealOps inside a mapping transaction): those stay on
// *WAL.
//
// Offsets are dense and assigned by the log from 0; they are never
// renumbered, Trim only moves Min up. A backend may keep records of its
// own in a queue (JetStream's term fences): they take an offset, reads
// skip them, so a read may return offsets with gaps but never out of
// order. The conformance suite runtime/wal/waltest checks every backend.
type Log interface {
	// Create creates an empty queue. Errors: ErrExists, ErrInvalid.
	Create(ctx context.Context, queue string) error
	// Delete removes a queue and its entries. Errors: ErrNoQueue.
	Delete(ctx context.Context, queue string) error
	// Queues lists the queues whose names start with prefix, in name order.
	Queues(ctx context.Context, prefix string) ([]string, error)
	// Append appends recs to queue in order and returns their entries,
	// with increasing offsets. A backend may drop a record whose ID it saw
	// recently (JetStream's duplicate window) and return the first
	// append's entry; the embedded WAL does not: where a record must
	// appear once, use AppendOnce. On an error
	// nothing was appended, except where the backend documents otherwise
	// for an unknown outcome (use AppendOnce to resolve one).
	// Errors: ErrNoQueue, ErrSealed, ErrTooLarge, ErrInvalid, ErrClosed,
	// and the backend's own (jswal: a fenced writer).
	Append(ctx context.Context, queue string, recs []Record) ([]Entry, error)
	// Read returns up to limit entries from offset from on, in offset
	// order (from == Max returns none). Errors: ErrNoQueue, *RangeError.
	Read(ctx context.Context, queue string, from uint64, limit int) ([]Entry, error)
	// Bounds returns the retained range [Min, Max). Errors: ErrNoQueue.
	Bounds(ctx context.Context, queue string) (Bounds, error)
	// Min and Max are Bounds' fields.
	Min(ctx context.Context, queue string) (uint64, error)
	Max(ctx context.Context, queue string) (uint64, error)
	// Trim removes entries below to (clamped to Max) and returns the new
	// Min (which may stop short of to where the backend documents it).
	Trim(ctx context.Context, queue string, to uint64) (uint64, error)
	// Wait blocks until an entry at or past offset can be read, the queue
	// is sealed there (ErrSealed), or ctx ends.
	Wait(ctx context.Context, queue string, offset uint64) error
	// NextHint returns a lower bound of the next offset the queue assigns
	// (a recovery low-water mark).
	NextHint(ctx context.Context, queue string) (uint64, error)
	// Close releases the log's resources (not the store or connection the
	// caller passed in).
	Close() error
}

// Fencer is implemented by logs that several writers can reach (jswal):
// Fence makes every later append of a writer with an older term fail
// (jswal.ErrFenced), so an old leader's late append cannot land after the
// new leader's. A new leader fences every queue it may write on taking
// office, before it reads their tails. The embedded WAL needs no fence:
// its single writer is the process that opened the catalog (and, on
// etcd, the catalog's own term compare).
type Fencer interface {
	Fence(ctx context.Context, queue string, term uint64) error
}

// Sealer is implemented by logs that can close a queue for good (the
// mapping seals a segment's queue when a remap moves it): after Seal,
// every append fails with ErrSealed and Wait at or past Seal.End returns
// ErrSealed. Sealing a sealed queue returns its seal.
type Sealer interface {
	Seal(ctx context.Context, queue string) (Seal, error)
}

// The embedded WAL is a Log and a Sealer.
var (
	_ Log    = (*WAL)(nil)
	_ Sealer = (*WAL)(nil)
)

// FindIDs reads queue from offset from (a low-water mark: an offset at or
// below which none of the records was appended) to its end and returns
// the entry of each of ids found there, by ID. A from below Min reads
// from Min: the records asked for were appended after from, so nothing
// trimmed can be one of them unless retention overtook the caller, which
// FindIDs cannot tell apart from "never appended".
func FindIDs(ctx context.Context, l Log, queue string, from uint64, ids []string) (map[string]Entry, error) {
	want := make(map[string]bool, len(ids))
	for _, id := range ids {
		if id != "" {
			want[id] = true
		}
	}
	found := make(map[string]Entry, len(want))
	if len(want) == 0 {
		return found, nil
	}
	b, err := l.Bounds(ctx, queue)
	if err != nil {
		return nil, err
	}
	at := max(from, b.Min)
	const page = 256
	for at < b.Max && len(found) < len(want) {
		ents, err := l.Read(ctx, queue, at, page)
		var re *RangeError
		if errors.As(err, &re) && at < re.Min {
			at = re.Min // trimmed meanwhile
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("wal: find ids in %q from %d: %w", queue, at, err)
		}
		if len(ents) == 0 {
			break
		}
		for _, e := range ents {
			if want[e.ID] {
				if _, dup := found[e.ID]; !dup {
					found[e.ID] = e
				}
			}
		}
		at = ents[len(ents)-1].Offset + 1
		if at >= b.Max {
			// The queue may have grown while we read: look once more.
			if nb, err := l.Bounds(ctx, queue); err == nil {
				b = nb
			}
		}
	}
	return found, nil
}

// AppendOnce appends the records of recs that queue does not hold yet,
// finding them by ID from the low-water offset low on (see FindIDs), and
// returns every record's entry: the found ones where they already are,
// the others newly appended. It is how a writer resolves an append whose
// outcome it does not know (a timeout, a crash, a failover) without
// appending anything twice. Every record must have an ID.
//
// The records found must be a prefix of recs (a backend appends a batch in
// order); a found record after a missing one is reported as an error,
// since appending the missing one now would reorder the batch.
func AppendOnce(ctx context.Context, l Log, queue string, low uint64, recs []Record) ([]Entry, error) {
	ids := make([]string, len(recs))
	for i, r := range recs {
		if r.ID == "" {
			return nil, fmt.Errorf("%w: record %d has no ID", ErrInvalid, i)
		}
		ids[i] = r.ID
	}
	found, err := FindIDs(ctx, l, queue, low, ids)
	if err != nil {
		return nil, err
	}
	out := make([]Entry, 0, len(recs))
	i := 0
	for ; i < len(recs); i++ {
		e, ok := found[recs[i].ID]
		if !ok {
			break
		}
		out = append(out, e)
	}
	for j := i; j < len(recs); j++ {
		if _, ok := found[recs[j].ID]; ok {
			return nil, fmt.Errorf("wal: append once to %q: record %q is there but %q before it is not", queue, recs[j].ID, recs[i].ID)
		}
	}
	if i == len(recs) {
		return out, nil
	}
	ents, err := l.Append(ctx, queue, recs[i:])
	if err != nil {
		return nil, err
	}
	return append(out, ents...), nil
}

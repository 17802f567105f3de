package catalog

import (
	"context"
	"errors"
)

// This file is the catalog's contract: every other package speaks to durable
// state only through these types. It must stay implementable on etcd
// (keys, values, versions, conditional commits), so nothing here exposes
// Badger types or reads inside a write transaction.

// Version identifies one committed state of a record. Zero means "absent".
// Versions of one key strictly increase with every write to it; all records
// written by one commit round may share one version.
type Version uint64

// KV is one record as read from a snapshot.
type KV struct {
	Key     []byte
	Value   []byte
	Version Version
}

// Reader is a consistent, read-only snapshot of the catalog.
// Values returned are owned by the caller (safe to keep after the view ends).
type Reader interface {
	// Get returns the value and version of key, or ErrNotFound.
	Get(key []byte) (value []byte, ver Version, err error)
	// Scan calls fn for every record with start <= key < end, in key
	// order. A nil end means "no upper bound". Returning ErrStop from fn
	// ends the scan early without error; any other error is returned.
	Scan(start, end []byte, fn func(KV) error) error
}

// Op is one write of a Batch: a put, or a delete when Delete is set.
type Op struct {
	Key    []byte
	Value  []byte
	Delete bool
}

// Check is an optimistic read condition: key must still be at Version
// (0 = must still be absent) when the batch commits.
type Check struct {
	Key     []byte
	Version Version
}

// RangeCheck is an optimistic scan condition: the records with
// Start <= key < End (nil End = unbounded) must be exactly Seen (same keys,
// same versions) when the batch commits. A key inserted into or removed
// from the range is a conflict.
type RangeCheck struct {
	Start, End []byte
	Seen       []KeyVersion
}

// KeyVersion names one record version seen by a scan.
type KeyVersion struct {
	Key     []byte
	Version Version
}

// Batch is one writer's atomic update: if every check holds, every op is
// applied, all in one durable commit; otherwise nothing is applied and
// Commit returns an error wrapping ErrConflict.
type Batch struct {
	Checks      []Check
	RangeChecks []RangeCheck
	Ops         []Op
}

// Store is the catalog. Implementations are safe for concurrent use.
type Store interface {
	// View runs fn on a consistent snapshot.
	View(ctx context.Context, fn func(Reader) error) error
	// Commit applies b atomically and durably (fsynced before it returns
	// when sync writes are on) through the batching committer: concurrent
	// writers' batches share one underlying transaction per round, but
	// each writer gets its own result. Checks are validated against the
	// store and against earlier writers of the same round.
	// Errors: ErrConflict (a check failed), ErrTooLarge (the batch cannot
	// be committed atomically), ErrClosed, ErrFenced (a store bound to a
	// leader's term, after that term ended), or a wrapped storage error.
	Commit(ctx context.Context, b *Batch) (Version, error)
	// NextSequence durably allocates n consecutive values of the named
	// sequence and returns the first. Values are strictly increasing and
	// never handed out twice, also across crashes and (cluster mode)
	// across leader terms (gaps are allowed). A term-bound store fails with
	// ErrFenced once its term ended.
	NextSequence(ctx context.Context, name string, n uint64) (uint64, error)
	// Close flushes and closes the store. Pending commits fail with ErrClosed.
	Close() error
}

var (
	// ErrNotFound is returned by Reader.Get for an absent key.
	ErrNotFound = errors.New("catalog: not found")
	// ErrConflict means an optimistic check of a Batch failed.
	ErrConflict = errors.New("catalog: conflict")
	// ErrTooLarge means a Batch exceeds what one atomic commit can hold.
	ErrTooLarge = errors.New("catalog: batch too large")
	// ErrClosed means the store has been closed.
	ErrClosed = errors.New("catalog: closed")
	// ErrStop ends a Scan early without error.
	ErrStop = errors.New("catalog: stop scan")
	// ErrFenced means the writer's term is over: a store bound to a
	// leader's term (cluster mode) refuses every commit and sequence
	// reservation once a newer leader exists. Nothing was applied; the
	// caller must stop its single-writer work (the replica steps down).
	ErrFenced = errors.New("catalog: fenced: this replica's leader term is over")
	// ErrUnavailable means the store could not serve the call for a
	// reason that passes (an etcd leader election, no quorum, a lost
	// connection): retry later. A commit that fails so may or may not
	// have been applied; retry it with its idempotency key.
	ErrUnavailable = errors.New("catalog: store unavailable")
)

// Key namespaces: every kind of record lives under its own prefix. A package
// builds its keys under its prefix and never reads or writes another's.
const (
	NSSys       = "sys/" // catalog metadata: format version, sequences
	NSBroadcast = "bc/"  // broadcast tasks, idempotency index
	NSWAL       = "wal/" // physical queues (runtime/wal)
	NSLock      = "lk/"  // lease locks, fences, audit records
	NSMapping   = "mp/"  // static topics, consumer offsets, producer idempotency
	NSPluginKV  = "pkv/" // plugin KV: pkv/<plugin>/<key>
)

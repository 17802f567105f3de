package wal

import (
	"errors"
	"fmt"
)

var (
	// ErrInvalid means an argument is malformed (bad queue name, empty batch).
	ErrInvalid = errors.New("wal: invalid argument")
	// ErrNoQueue means the physical queue does not exist (never created,
	// or deleted).
	ErrNoQueue = errors.New("wal: no such queue")
	// ErrExists means Create found the queue already present.
	ErrExists = errors.New("wal: queue exists")
	// ErrSealed means the queue was sealed (its segment closed by a remap):
	// nothing more can be appended to it. The caller re-resolves its target.
	ErrSealed = errors.New("wal: queue sealed")
	// ErrTooLarge means one Append call exceeds MaxBatchBytes or a record
	// exceeds MaxRecordBytes.
	ErrTooLarge = errors.New("wal: too large")
	// ErrClosed means the WAL has been closed.
	ErrClosed = errors.New("wal: closed")
	// ErrUnavailable means the backend could not serve the call for a
	// reason that passes (JetStream without quorum or a stream leader, a
	// lost connection): retry later. An append that fails so may or may
	// not be stored: resolve it with AppendOnce.
	ErrUnavailable = errors.New("wal: backend unavailable")
	// ErrOutOfRange is matched (errors.Is) by *RangeError.
	ErrOutOfRange = errors.New("wal: offset out of range")
)

// RangeError reports a read below the first retained offset or beyond the
// end of a queue. errors.Is(err, ErrOutOfRange) holds for it.
type RangeError struct {
	Queue    string
	Offset   uint64
	Min, Max uint64 // retained range [Min, Max)
}

func (e *RangeError) Error() string {
	return fmt.Sprintf("wal: offset %d out of range of queue %q: retained [%d, %d)", e.Offset, e.Queue, e.Min, e.Max)
}

// Is reports whether target is ErrOutOfRange.
func (e *RangeError) Is(target error) bool { return target == ErrOutOfRange }

func noQueue(q string) error { return fmt.Errorf("%w: %q", ErrNoQueue, q) }

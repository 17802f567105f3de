package mapping

import (
	"errors"
	"fmt"
)

var (
	// ErrInvalid: malformed input (names, counts, offsets).
	ErrInvalid = errors.New("mapping: invalid argument")
	// ErrNotFound: no such topic, logic queue or group offset.
	ErrNotFound = errors.New("mapping: not found")
	// ErrExists: the topic already exists.
	ErrExists = errors.New("mapping: topic exists")
	// ErrShrink: a grow that would reduce the number of queues.
	ErrShrink = errors.New("mapping: topics cannot shrink")
	// ErrUnknownBroker: a broker not in the configuration.
	ErrUnknownBroker = errors.New("mapping: unknown broker")
	// ErrUnknownPolicy: no policy of that name.
	ErrUnknownPolicy = errors.New("mapping: unknown policy")
	// ErrPolicy is matched by *PolicyError.
	ErrPolicy = errors.New("mapping: bad policy output")
	// ErrInvariant is matched by *InvariantError.
	ErrInvariant = errors.New("mapping: invariant violated")
	// ErrOutOfRange is matched by *RangeError.
	ErrOutOfRange = errors.New("mapping: offset out of range")
	// ErrReserved: the operation is not allowed on the control topic.
	ErrReserved = errors.New("mapping: reserved topic")
	// ErrSequence: a producer sequence number below the last one that is
	// not a retry of one of the last ProducerWindow appends (older than
	// the window, or never appended).
	ErrSequence = errors.New("mapping: producer sequence out of order")
)

// RangeError is a read or commit at a logic offset outside [Min, Max].
// errors.Is(err, ErrOutOfRange) holds for it.
type RangeError struct {
	VChannel string
	Offset   uint64
	Min, Max uint64
}

func (e *RangeError) Error() string {
	return fmt.Sprintf("mapping: offset %d of %s out of range: retained [%d, %d)", e.Offset, e.VChannel, e.Min, e.Max)
}

// Is reports whether target is ErrOutOfRange (or wal.ErrOutOfRange, so
// resolver users can test one sentinel).
func (e *RangeError) Is(target error) bool {
	return target == ErrOutOfRange || target == walErrOutOfRange
}

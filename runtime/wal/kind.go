package wal

import (
	"fmt"
	"strings"
)

// Kind says who wrote a record and what it is. It is stored in the entry
// record itself (entry format version 2), so it cannot be forged through
// properties: client appends can only write KindData (every append of
// KindData is refused if it carries a property in the ReservedPrefix
// namespace), KindBroadcast and KindMarker are written by hostd alone
// (the broadcast engine through its own resolver adapter).
//
// Recovery and consumers recognize hostd's own records by their kind,
// never by their properties.
type Kind uint8

const (
	// KindData is an ordinary message appended by a client (the zero
	// value: a Record that does not say otherwise is data).
	KindData Kind = 0
	// KindBroadcast is a message appended by the broadcast engine; its
	// hostd.broadcast.id / hostd.message.type properties are hostd's.
	KindBroadcast Kind = 1
	// KindMarker is a control marker hostd writes into a queue, such as
	// the remap marker in each moved logic queue. Consumers of data skip
	// it; it is a broadcast message too (it carries the same headers).
	KindMarker Kind = 2
	// KindLegacy is what an entry written before record kinds existed
	// (entry format version 1) decodes as: data or broadcast, nobody can
	// tell. It is never written.
	KindLegacy Kind = 3
)

// String returns "data", "broadcast", "marker" or "legacy".
func (k Kind) String() string {
	switch k {
	case KindData:
		return "data"
	case KindBroadcast:
		return "broadcast"
	case KindMarker:
		return "marker"
	case KindLegacy:
		return "legacy"
	}
	return fmt.Sprintf("kind(%d)", uint8(k))
}

// Hostd reports whether k is a record hostd wrote itself (broadcast or
// marker). Legacy records are not: their kind is unknown.
func (k Kind) Hostd() bool { return k == KindBroadcast || k == KindMarker }

// writable reports whether an append may write k.
func (k Kind) writable() bool { return k == KindData || k == KindBroadcast || k == KindMarker }

// ReservedPrefix is the property namespace reserved to hostd: a data
// record (every client append) carrying a property whose key starts with
// it is refused with a *ReservedPropertyError.
const ReservedPrefix = "hostd."

// ReservedPropertyError reports a data record carrying a property of the
// reserved "hostd." namespace. errors.Is(err, ErrInvalid) holds for it.
type ReservedPropertyError struct {
	Record   int    // index of the record in its batch
	Property string // the offending property key
}

func (e *ReservedPropertyError) Error() string {
	return fmt.Sprintf("wal: record %d: property %q is in the reserved %q namespace", e.Record, e.Property, ReservedPrefix)
}

// Is reports whether target is ErrInvalid.
func (e *ReservedPropertyError) Is(target error) bool { return target == ErrInvalid }

// CheckProps returns a *ReservedPropertyError (with Record = index) if
// props holds a key of the reserved namespace. Write paths that take
// properties from outside call it to refuse them early; the WAL checks
// every data record again on append.
func CheckProps(index int, props map[string]string) error {
	var bad string
	for k := range props {
		if strings.HasPrefix(k, ReservedPrefix) && (bad == "" || k < bad) {
			bad = k // the smallest, so the error is deterministic
		}
	}
	if bad != "" {
		return &ReservedPropertyError{Record: index, Property: bad}
	}
	return nil
}

// checkRecord validates a record's kind and, for data, its properties.
func checkRecord(index int, r Record) error {
	if !r.Kind.writable() {
		return fmt.Errorf("%w: record %d: kind %s cannot be appended", ErrInvalid, index, r.Kind)
	}
	if r.Kind == KindData {
		return CheckProps(index, r.Props)
	}
	return nil
}

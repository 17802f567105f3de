package wal

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math/bits"
	"sort"
	"unicode/utf8"

	"github.com/hostd-dev/hostd/runtime/catalog"
)

// Key layout (all under catalog.NSWAL):
//
//	wal/m/<queue>                 queue meta: next offset, last tick, bytes, state
//	wal/n/<queue>                 first retained offset (moved by Trim only)
//	wal/e/<queue>\x00<offset BE8> one entry
//
// Queue names never contain NUL, so the entry range of one queue,
// [wal/e/<queue>\x00, wal/e/<queue>\x01), holds no other queue's keys.
const (
	prefixMeta  = catalog.NSWAL + "m/"
	prefixMin   = catalog.NSWAL + "n/"
	prefixEntry = catalog.NSWAL + "e/"
)

// MaxQueueName is the longest physical queue name accepted, in bytes.
const MaxQueueName = 200

func metaKey(q string) []byte { return []byte(prefixMeta + q) }
func minKey(q string) []byte  { return []byte(prefixMin + q) }

func entryKey(q string, off uint64) []byte {
	k := make([]byte, 0, len(prefixEntry)+len(q)+9)
	k = append(k, prefixEntry...)
	k = append(k, q...)
	k = append(k, 0)
	return binary.BigEndian.AppendUint64(k, off)
}

func entryEnd(q string) []byte {
	k := make([]byte, 0, len(prefixEntry)+len(q)+1)
	k = append(k, prefixEntry...)
	k = append(k, q...)
	return append(k, 1)
}

// ValidateQueueName reports whether name can name a physical queue:
// 1..MaxQueueName bytes of UTF-8 without control characters.
func ValidateQueueName(name string) error {
	if name == "" {
		return fmt.Errorf("%w: empty queue name", ErrInvalid)
	}
	if len(name) > MaxQueueName {
		return fmt.Errorf("%w: queue name is %d bytes, max %d", ErrInvalid, len(name), MaxQueueName)
	}
	if !utf8.ValidString(name) {
		return fmt.Errorf("%w: queue name %q is not UTF-8", ErrInvalid, name)
	}
	for _, r := range name {
		if r < 0x20 || r == 0x7f {
			return fmt.Errorf("%w: queue name %q contains a control character", ErrInvalid, name)
		}
	}
	return nil
}

// queue states stored in the meta record.
const (
	stateOpen     = 0
	stateSealed   = 1 // no more appends; next is the end offset
	stateDeleting = 2 // Delete in progress; the queue no longer exists
)

// meta is the per-queue record written with every append commit.
type meta struct {
	next     uint64 // next offset to assign (exclusive max)
	lastTick uint64 // tick of the last entry (0 if none)
	bytes    uint64 // cumulative bytes ever appended (see entry.cum)
	state    byte
}

const metaVersion = 1

func (m meta) encode() []byte {
	b := make([]byte, 0, 32)
	b = append(b, metaVersion, m.state)
	b = binary.AppendUvarint(b, m.next)
	b = binary.AppendUvarint(b, m.lastTick)
	return binary.AppendUvarint(b, m.bytes)
}

var errShort = errors.New("truncated record")

func decodeMeta(b []byte) (meta, error) {
	var m meta
	if len(b) < 2 {
		return m, errShort
	}
	if b[0] != metaVersion {
		return m, fmt.Errorf("unknown meta version %d", b[0])
	}
	m.state = b[1]
	if m.state > stateDeleting {
		return m, fmt.Errorf("unknown queue state %d", m.state)
	}
	b = b[2:]
	var err error
	if m.next, b, err = uvarint(b); err != nil {
		return m, err
	}
	if m.lastTick, b, err = uvarint(b); err != nil {
		return m, err
	}
	if m.bytes, b, err = uvarint(b); err != nil {
		return m, err
	}
	if len(b) != 0 {
		return m, fmt.Errorf("%d trailing bytes", len(b))
	}
	return m, nil
}

func encodeMin(v uint64) []byte { return binary.AppendUvarint(nil, v) }

func decodeMin(b []byte) (uint64, error) {
	v, rest, err := uvarint(b)
	if err == nil && len(rest) != 0 {
		err = fmt.Errorf("%d trailing bytes", len(rest))
	}
	return v, err
}

func uvarint(b []byte) (uint64, []byte, error) {
	v, n := binary.Uvarint(b)
	if n <= 0 {
		return 0, nil, errShort
	}
	if want := (bits.Len64(v|1) + 6) / 7; n != want {
		return 0, nil, errors.New("non-canonical varint")
	}
	return v, b[n:], nil
}

// Entry record layout (version 2, written since record kinds exist):
//
//	[1]       version (2)
//	[1]       kind (KindData, KindBroadcast, KindMarker)
//	uvarint   tick
//	uvarint   cum: cumulative bytes of the queue before this entry
//	uvarint   number of properties, then per property (sorted by key):
//	          uvarint len, key, uvarint len, value
//	rest      payload
//
// Version 1 is the same without the kind byte; it still decodes, as
// KindLegacy. Nothing writes version 1 any more.
const (
	entryV1      = 1
	entryVersion = 2
)

// propID is the property key under which an entry stores Record.ID. It
// is in the reserved namespace, so no data record can carry it as a
// property: decodeEntry returns it as Entry.ID, never in Props.
const propID = ReservedPrefix + "wal.id"

// recordSize is what an entry counts toward byte retention and batch limits.
func recordSize(r Record) int {
	n := len(r.Payload) + 16
	if r.ID != "" {
		n += len(propID) + len(r.ID) + 4
	}
	for k, v := range r.Props {
		n += len(k) + len(v) + 4
	}
	return n
}

func encodeEntry(tick, cum uint64, r Record) []byte {
	b := make([]byte, 0, recordSize(r)+24)
	if r.Kind == KindLegacy {
		b = append(b, entryV1) // only re-encodes what was decoded (fuzz, tests)
	} else {
		b = append(b, entryVersion, byte(r.Kind))
	}
	b = binary.AppendUvarint(b, tick)
	b = binary.AppendUvarint(b, cum)
	keys := make([]string, 0, len(r.Props)+1)
	for k := range r.Props {
		if k != propID || r.ID == "" {
			keys = append(keys, k)
		}
	}
	if r.ID != "" {
		keys = append(keys, propID)
	}
	sort.Strings(keys)
	b = binary.AppendUvarint(b, uint64(len(keys)))
	for _, k := range keys {
		b = binary.AppendUvarint(b, uint64(len(k)))
		b = append(b, k...)
		v := r.Props[k]
		if k == propID && r.ID != "" {
			v = r.ID
		}
		b = binary.AppendUvarint(b, uint64(len(v)))
		b = append(b, v...)
	}
	return append(b, r.Payload...)
}

// decodeEntry decodes an entry record stored at offset off. It never panics
// on malformed input.
func decodeEntry(off uint64, b []byte) (Entry, uint64, error) {
	var e Entry
	e.Offset = off
	if len(b) < 1 {
		return e, 0, errShort
	}
	switch b[0] {
	case entryV1:
		e.Kind = KindLegacy
		b = b[1:]
	case entryVersion:
		if len(b) < 2 {
			return e, 0, errShort
		}
		e.Kind = Kind(b[1])
		if !e.Kind.writable() {
			return e, 0, fmt.Errorf("unknown record kind %d", b[1])
		}
		b = b[2:]
	default:
		return e, 0, fmt.Errorf("unknown entry version %d", b[0])
	}
	var err error
	var cum, n uint64
	if e.Tick, b, err = uvarint(b); err != nil {
		return e, 0, err
	}
	if cum, b, err = uvarint(b); err != nil {
		return e, 0, err
	}
	if n, b, err = uvarint(b); err != nil {
		return e, 0, err
	}
	if n > uint64(len(b))/2 {
		return e, 0, fmt.Errorf("property count %d exceeds record", n)
	}
	if n > 0 {
		e.Props = make(map[string]string, n)
	}
	var prev string
	for i := uint64(0); i < n; i++ {
		var kl, vl uint64
		if kl, b, err = uvarint(b); err != nil {
			return e, 0, err
		}
		if kl > uint64(len(b)) {
			return e, 0, errShort
		}
		k := string(b[:kl])
		b = b[kl:]
		if vl, b, err = uvarint(b); err != nil {
			return e, 0, err
		}
		if vl > uint64(len(b)) {
			return e, 0, errShort
		}
		if i > 0 && k <= prev {
			return e, 0, fmt.Errorf("property keys not sorted or duplicated at %q", k)
		}
		prev = k
		if k == propID && e.Kind != KindLegacy {
			e.ID = string(b[:vl])
		} else {
			e.Props[k] = string(b[:vl])
		}
		b = b[vl:]
	}
	if len(e.Props) == 0 {
		e.Props = nil
	}
	e.Payload = append([]byte(nil), b...)
	return e, cum, nil
}

package jswal

import (
	"encoding/binary"
	"errors"
	"fmt"
	"sort"
	"strconv"

	"github.com/nats-io/nats.go"

	"github.com/hostd-dev/hostd/runtime/wal"
)

// Message layout on the stream.
//
// Body:
//
//	[1]      version (1)
//	[1]      kind: wal.Kind (data, broadcast, marker), kindFence or kindSeal
//	uvarint  tick
//	uvarint  number of properties, then per property (sorted by key):
//	         uvarint len, key, uvarint len, value
//	rest     payload (a fence's payload is empty; its term is the header)
//
// Headers: Nats-Msg-Id (Record.ID; in a pipelined batch, a generated id
// for records without one), Hostd-Id (Record.ID, as read back),
// Nats-Expected-Last-Sequence (every append), Nats-Expected-Last-Msg-Id
// (every record of a pipelined batch but the first), Hostd-Term (the writer's term: every record, fences
// included), Hostd-Producer and Hostd-Producer-Seq (the writer and its
// per-writer sequence, so a retry can recognize its own message and
// producer state can be rebuilt from a stream's tail).
const (
	bodyVersion = 1
	kindFence   = 0x80
	kindSeal    = 0x81 // the queue's last record: nothing may follow it

	hdrTerm      = "Hostd-Term"
	hdrProducer  = "Hostd-Producer"
	hdrProdSeq   = "Hostd-Producer-Seq"
	hdrNatsMsgID = "Nats-Msg-Id"
	hdrID        = "Hostd-Id" // Record.ID (Nats-Msg-Id may be generated)
)

var errShort = errors.New("jswal: short message")

// recordSize counts a record as the embedded WAL does (payload,
// properties, a fixed overhead), so limits mean the same on both.
func recordSize(r wal.Record) int {
	n := len(r.Payload) + 16
	for k, v := range r.Props {
		n += len(k) + len(v) + 4
	}
	return n
}

func encodeBody(kind byte, tick uint64, props map[string]string, payload []byte) []byte {
	b := make([]byte, 0, len(payload)+32+len(props)*16)
	b = append(b, bodyVersion, kind)
	b = binary.AppendUvarint(b, tick)
	b = binary.AppendUvarint(b, uint64(len(props)))
	keys := make([]string, 0, len(props))
	for k := range props {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		b = binary.AppendUvarint(b, uint64(len(k)))
		b = append(b, k...)
		b = binary.AppendUvarint(b, uint64(len(props[k])))
		b = append(b, props[k]...)
	}
	return append(b, payload...)
}

// decoded is one stream message as hostd reads it.
type decoded struct {
	fence bool // a term fence: reads skip it
	seal  bool // a seal: reads skip it, nothing follows it
	term  uint64
	prod  string
	pseq  uint64
	entry wal.Entry
}

func uvarint(b []byte) (uint64, []byte, error) {
	v, n := binary.Uvarint(b)
	if n <= 0 {
		return 0, nil, errShort
	}
	return v, b[n:], nil
}

// decodeMsg decodes a stream message at sequence seq. It never panics on
// malformed input.
func decodeMsg(seq uint64, h nats.Header, b []byte) (decoded, error) {
	var d decoded
	d.entry.Offset = seq - 1
	d.term, _ = strconv.ParseUint(h.Get(hdrTerm), 10, 64)
	d.prod = h.Get(hdrProducer)
	d.pseq, _ = strconv.ParseUint(h.Get(hdrProdSeq), 10, 64)
	d.entry.ID = h.Get(hdrID)
	if len(b) < 2 {
		return d, errShort
	}
	if b[0] != bodyVersion {
		return d, fmt.Errorf("jswal: unknown message version %d", b[0])
	}
	switch k := b[1]; {
	case k == kindFence:
		d.fence = true
	case k == kindSeal:
		d.seal = true
	case wal.Kind(k) == wal.KindData || wal.Kind(k) == wal.KindBroadcast || wal.Kind(k) == wal.KindMarker:
		d.entry.Kind = wal.Kind(k)
	default:
		return d, fmt.Errorf("jswal: unknown record kind %d", k)
	}
	b = b[2:]
	var err error
	var n uint64
	if d.entry.Tick, b, err = uvarint(b); err != nil {
		return d, err
	}
	if n, b, err = uvarint(b); err != nil {
		return d, err
	}
	if n > uint64(len(b))/2 {
		return d, fmt.Errorf("jswal: property count %d exceeds message", n)
	}
	if n > 0 {
		d.entry.Props = make(map[string]string, n)
	}
	for i := uint64(0); i < n; i++ {
		var kl, vl uint64
		if kl, b, err = uvarint(b); err != nil {
			return d, err
		}
		if kl > uint64(len(b)) {
			return d, errShort
		}
		k := string(b[:kl])
		b = b[kl:]
		if vl, b, err = uvarint(b); err != nil {
			return d, err
		}
		if vl > uint64(len(b)) {
			return d, errShort
		}
		d.entry.Props[k] = string(b[:vl])
		b = b[vl:]
	}
	d.entry.Payload = append([]byte(nil), b...)
	return d, nil
}

package broadcast

import (
	"encoding/json"
	"fmt"
	"math"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/hostd-dev/hostd/sdk/abi"
)

// Sizing. A task is one catalog value (bc/t/<id>) for its whole life and
// its message is one WAL record per vchannel. Both are sized at their
// worst case before Submit reserves an idempotency key, takes a lock or
// allocates an ID, so that nothing the engine answers (202 PENDING
// included) can be about a record that will never fit: what cannot fit
// is refused with a *TooLargeError (ErrTooLarge, HTTP 413).
//
// The worst case of the task record is the request's own fields plus
// every field the engine may add later at its largest: the FAILED or
// TOMBSTONE state, finish and retry times, attempt counters, epochs,
// low-water marks, the trace carrier, an abandon note and the kept error.
// The two free-text fields the engine adds (LastError, Abandon.By/Reason)
// are clipped when stored (clipJSON), so their worst case is known.

const (
	// maxStoredError bounds LastError as stored (JSON-encoded bytes).
	maxStoredError = 4 << 10
	// maxStoredNote bounds Abandon.By and Abandon.Reason as stored.
	maxStoredNote = 1 << 10
	// maxTraceState bounds the persisted W3C tracestate (the traceparent
	// is 55 bytes); a longer tracestate is not persisted (see create).
	maxTraceState = 512
	// walRecordOverhead is what a WAL record costs beyond its payload and
	// properties, with room to spare (runtime/wal counts 16 bytes plus 4
	// per property; the margin keeps a format change from breaking this).
	walRecordOverhead = 256
	// DefaultMaxRecordBytes is the catalog value limit assumed when the
	// Store cannot tell its own (catalog.DefaultOptions's max_value_size).
	DefaultMaxRecordBytes = 1 << 20
	// DefaultMaxMessageBytes is the WAL record limit assumed by default
	// (runtime/wal's default max_record_bytes).
	DefaultMaxMessageBytes = 1<<20 - 4<<10
)

// TooLargeError says a request can never be stored: What (e.g. "payload",
// "task record", "message") is Size bytes, above Limit, which is set by
// LimitOption. It wraps ErrTooLarge.
type TooLargeError struct {
	What        string
	Size        int
	Limit       int
	LimitOption string
}

func (e *TooLargeError) Error() string {
	return fmt.Sprintf("broadcast: %s is %d bytes, limit is %d (%s)", e.What, e.Size, e.Limit, e.LimitOption)
}

func (e *TooLargeError) Unwrap() error { return ErrTooLarge }

// worstTime is the longest RFC 3339 time JSON encodes.
var worstTime = time.Date(9999, 12, 31, 23, 59, 59, 999999999, time.FixedZone("", -(23*3600+59*60)))

// worstRecord returns rec with every field the engine may set later at
// its largest. rec's request fields (message, vchannels, keys, idempotency
// key, scope, trace) are kept.
func worstRecord(rec taskRecord) taskRecord {
	t := worstTime
	rec.ID = math.MaxUint64
	rec.State = StateTombstone
	rec.AckSyncUp = true
	rec.CreatedAt, rec.FinishedAt, rec.NextRetry = t, &t, &t
	rec.Attempts, rec.AttemptBase, rec.Conflicts, rec.Epoch = math.MaxInt64, math.MaxInt64, math.MaxInt64, math.MaxInt64
	rec.LastError = strings.Repeat("x", maxStoredError)
	rec.Abandoned = &Abandon{By: strings.Repeat("x", maxStoredNote), Reason: strings.Repeat("x", maxStoredNote), At: t}
	rec.Fingerprint = strings.Repeat("f", 64)
	rec.Kinds = true
	rec.LowWater = make(map[string]uint64, len(rec.VChannels))
	for _, vc := range rec.VChannels {
		rec.LowWater[vc] = math.MaxUint64
	}
	rec.Trace = map[string]string{"traceparent": strings.Repeat("0", 55), "tracestate": strings.Repeat("x", maxTraceState)}
	return rec
}

// messageSize is the size of the WAL record of msg as the engine appends
// it (with its hostd.* headers at their largest).
func messageSize(msg *Message) int {
	n := walRecordOverhead + len(msg.Payload)
	for k, v := range msg.Properties {
		n += len(k) + len(v) + 4
	}
	n += len(HeaderBroadcastID) + 20 + 4
	n += len(HeaderMessageType) + len(msg.Type) + 4
	n += len(headerEpoch) + 20 + 4
	return n
}

// checkSize refuses a request whose task record or message can never be
// stored. It runs before any reservation, lock or ID.
func (e *Engine) checkSize(rec *taskRecord) error {
	if n := messageSize(&rec.Message); n > e.o.MaxMessageBytes {
		return &TooLargeError{What: "message (payload, properties and headers as one WAL record)", Size: n,
			Limit: e.o.MaxMessageBytes, LimitOption: "wal max_record_bytes"}
	}
	n, err := recordSize(rec)
	if err != nil {
		return fmt.Errorf("%w: %v", ErrInvalidRequest, err)
	}
	if n > e.o.MaxRecordBytes {
		return &TooLargeError{What: "task record (base64 payload, properties, resource keys, vchannels, idempotency key and scope)",
			Size: n, Limit: e.o.MaxRecordBytes, LimitOption: "catalog max_value_size"}
	}
	return nil
}

// engineFieldsSize is the JSON size of a worst-case record whose request
// fields are empty: what the engine may add to any record.
var engineFieldsSize = func() int {
	w := worstRecord(taskRecord{})
	w.LowWater = nil
	b, _ := json.Marshal(&w)
	return len(b)
}()

// recordSize bounds the JSON size of rec's worst case (worstRecord) from
// above without building it: the engine's fields (engineFieldsSize) plus
// the request's own fields encoded on their own, plus a low-water mark
// per vchannel. It over-counts by the few bytes of the empty request
// fields inside engineFieldsSize; TestRecordSizeBound checks the bound.
func recordSize(rec *taskRecord) (int, error) {
	b, err := json.Marshal(struct {
		Message   Message           `json:"message"`
		VChannels []string          `json:"vchannels"`
		Keys      []abi.ResourceKey `json:"keys"`
		IdemKey   string            `json:"idem_key,omitempty"`
		Scope     Scope             `json:"scope,omitempty"`
	}{rec.Message, rec.VChannels, rec.Keys, rec.IdemKey, rec.Scope})
	if err != nil {
		return 0, err
	}
	vcs, err := json.Marshal(rec.VChannels)
	if err != nil {
		return 0, err
	}
	// ,"low_water":{"<vc>":18446744073709551615,...}
	low := len(`,"low_water":{}`) + len(vcs) + len(rec.VChannels)*(1+20)
	return engineFieldsSize + len(b) + low, nil
}

// CheckLimits reports whether a broadcast of maxPayload bytes, with the
// longest idempotency key (maxKeyLen) and the given vchannels (the
// control channel is added), can fit one catalog value of maxRecord bytes
// and one WAL record of maxMessage bytes at all — the check
// Options.Validate and the host's config validation run, so that an
// impossible max_payload is refused at start instead of on every request.
// Errors are *TooLargeError naming the option.
func CheckLimits(maxPayload, maxKeyLen int, vchannels []string, maxRecord, maxMessage int) error {
	msg := Message{Type: "t", Payload: make([]byte, maxPayload)}
	if n := messageSize(&msg); n > maxMessage {
		return &TooLargeError{What: "max_payload as one WAL record", Size: n, Limit: maxMessage, LimitOption: "broadcast.max_payload vs wal max_record_bytes"}
	}
	vcs := append([]string{ControlChannel}, vchannels...)
	rec := taskRecord{Message: msg, VChannels: vcs, IdemKey: strings.Repeat("k", maxKeyLen),
		Keys: []abi.ResourceKey{{Domain: abi.DomainCluster, Key: "cluster"}}}
	b, err := json.Marshal(worstRecord(rec))
	if err != nil {
		return err
	}
	if len(b) > maxRecord {
		return &TooLargeError{What: "a task record at max_payload (base64, 4/3 of the payload)", Size: len(b), Limit: maxRecord,
			LimitOption: "broadcast.max_payload vs catalog max_value_size"}
	}
	return nil
}

// clipJSON returns s cut (at a rune boundary, with a marker) so that its
// JSON encoding is at most n bytes.
func clipJSON(s string, n int) string {
	if jsonLen(s) <= n {
		return s
	}
	const mark = "…(truncated)"
	cut := min(len(s), n)
	for cut > 0 {
		for cut > 0 && cut < len(s) && !utf8.RuneStart(s[cut]) {
			cut--
		}
		c := s[:cut] + mark
		if jsonLen(c) <= n {
			return c
		}
		cut -= max(1, (jsonLen(c)-n)/6)
	}
	return mark
}

func jsonLen(s string) int {
	b, _ := json.Marshal(s)
	return len(b) - 2 // quotes are counted by the worst case's own string
}

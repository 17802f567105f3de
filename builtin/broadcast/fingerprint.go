package broadcast

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"sort"
)

// fingerprint is the idempotency fingerprint of a request: the hex
// sha256 of its message type, payload, properties (sorted) and sorted
// vchannels (the control channel included) — not its resource keys, wait
// mode or timeout, so a retry after a rename still hits its original. It
// is persisted with the task (taskRecord.Fingerprint) and compared
// verbatim, never recomputed from a stored record; a record without one
// (written before fingerprints existed) matches on the key alone.
func fingerprint(msg *Message, vcs []string) string {
	props := make([][2]string, 0, len(msg.Properties))
	for k, v := range msg.Properties {
		props = append(props, [2]string{k, v})
	}
	sort.Slice(props, func(i, j int) bool { return props[i][0] < props[j][0] })
	sorted := append([]string(nil), vcs...)
	sort.Strings(sorted)
	// A JSON array: unambiguous (no separator inside one field can forge
	// another), and the payload is base64.
	b := mustJSON([]any{"hostd.idem.v1", msg.Type, msg.Payload, props, sorted})
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

func (t *task) fingerprint() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.rec.Fingerprint
}

// IdempotencyConflictError: the idempotency key (of Type, in its scope)
// belongs to broadcast OriginalID, whose request differs (type, payload,
// properties or vchannels). It wraps ErrIdempotencyConflict; the API
// answers 409 conflict with details.original_id.
type IdempotencyConflictError struct {
	Type       string
	Key        string
	OriginalID uint64
}

func (e *IdempotencyConflictError) Error() string {
	k, _ := json.Marshal(clipJSON(e.Key, 64))
	return fmt.Sprintf("broadcast: idempotency key %s of type %q belongs to broadcast %d, whose request differs (payload, properties or vchannels); use a new key for a new operation",
		k, e.Type, e.OriginalID)
}

func (e *IdempotencyConflictError) Unwrap() error { return ErrIdempotencyConflict }

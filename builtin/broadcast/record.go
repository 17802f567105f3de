package broadcast

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/hostd-dev/hostd/runtime/catalog"
	"github.com/hostd-dev/hostd/sdk/abi"
)

const (
	prefixTask = catalog.NSBroadcast + "t/"
	prefixCP   = catalog.NSBroadcast + "c/"
	prefixAck  = catalog.NSBroadcast + "a/"
	seqName    = "broadcast/id"
	idBlock    = 64
)

func taskKey(id uint64) []byte { return []byte(fmt.Sprintf("%s%016x", prefixTask, id)) }
func cpKey(id uint64, vc string) []byte {
	return []byte(fmt.Sprintf("%s%016x/%s", prefixCP, id, vc))
}
func ackKey(id uint64, vc string) []byte {
	return []byte(fmt.Sprintf("%s%016x/%s", prefixAck, id, vc))
}

// prefixEnd returns the smallest key greater than every key with prefix p.
func prefixEnd(p string) []byte {
	b := []byte(p)
	for i := len(b) - 1; i >= 0; i-- {
		if b[i] < 0xff {
			b[i]++
			return b[:i+1]
		}
	}
	return nil
}

// parseIDKey splits "<prefix><id:016x>[/<vchannel>]".
func parseIDKey(prefix string, key []byte) (uint64, string, error) {
	s := strings.TrimPrefix(string(key), prefix)
	idPart, vc, _ := strings.Cut(s, "/")
	id, err := strconv.ParseUint(idPart, 16, 64)
	if err != nil || len(idPart) != 16 {
		return 0, "", fmt.Errorf("%w: bad key %q", ErrCorruptCatalog, key)
	}
	return id, vc, nil
}

// taskRecord is the persisted task (bc/t/<id>).
type taskRecord struct {
	ID          uint64            `json:"id"`
	State       State             `json:"state"`
	Message     Message           `json:"message"`
	VChannels   []string          `json:"vchannels"`
	Keys        []abi.ResourceKey `json:"keys"`
	IdemKey     string            `json:"idem_key,omitempty"`
	Scope       Scope             `json:"scope,omitempty"`
	AckSyncUp   bool              `json:"ack_sync_up,omitempty"`
	Trace       map[string]string `json:"trace,omitempty"`
	CreatedAt   time.Time         `json:"created_at"`
	FinishedAt  *time.Time        `json:"finished_at,omitempty"`
	Attempts    int               `json:"attempts,omitempty"`
	AttemptBase int               `json:"attempt_base,omitempty"` // Attempts at the last admin retry
	Conflicts   int               `json:"conflicts,omitempty"`
	LastError   string            `json:"last_error,omitempty"`
	NextRetry   *time.Time        `json:"next_retry,omitempty"`
	Abandoned   *Abandon          `json:"abandoned,omitempty"`
	Epoch       int               `json:"epoch,omitempty"` // admin retries; control channel re-appended per epoch
	// LowWater is each vchannel's next offset read before this task (or
	// its latest epoch) was persisted: its appends are at or above it.
	LowWater map[string]uint64 `json:"low_water,omitempty"`
	// Fingerprint is the hex sha256 of the request (see fingerprint);
	// records written before fingerprints existed have none.
	Fingerprint string `json:"fingerprint,omitempty"`
	// Kinds: the task was created when appends carried a record kind
	// (wal.KindBroadcast). Recovery then trusts only records of hostd's
	// kinds; for older tasks it also trusts legacy (kind-less) records.
	Kinds bool `json:"kinds,omitempty"`
}

// cpRecord is a persisted checkpoint (bc/c/<id>/<vchannel>).
type cpRecord struct {
	Checkpoint
	Attempts int `json:"attempts"`
	Epoch    int `json:"epoch,omitempty"`
}

func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil { // only plain structs are encoded here
		panic(fmt.Sprintf("broadcast: encode: %v", err))
	}
	return b
}

func decodeTask(key, val []byte) (*taskRecord, error) {
	var r taskRecord
	if err := json.Unmarshal(val, &r); err != nil {
		return nil, fmt.Errorf("%w: task %q: %v", ErrCorruptCatalog, key, err)
	}
	switch r.State {
	case StatePending, StateTombstone, StateFailed:
	default:
		return nil, fmt.Errorf("%w: task %q: unknown state %q", ErrCorruptCatalog, key, r.State)
	}
	return &r, nil
}

// idemIndexKey encodes (type, scope, client key) unambiguously: a JSON
// array of strings, so no separator inside one part can forge another.
func idemIndexKey(msgType string, sc Scope, key string) string {
	kind := sc.Kind
	if kind == "" {
		kind = "cluster"
	}
	return string(mustJSON([]string{msgType, kind, sc.ID, key}))
}

package catalog

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
)

// seqPrefix holds one record per sequence name.
const seqPrefix = NSSys + "seq/"

// seqState is the in-memory part of one sequence: values in [next, limit)
// are durably reserved and not yet handed out.
type seqState struct {
	mu     sync.Mutex
	loaded bool
	next   uint64
	limit  uint64
}

// NextSequence durably allocates n consecutive values of the named sequence
// and returns the first. Values start at 1, strictly increase, and are never
// handed out twice, also across crashes: a block of max(n, SequenceBlock)
// values is reserved durably before any of it is handed out, and a restart
// continues after the reserved block (unused values become gaps).
// Errors: ErrInvalid (empty name, n == 0, overflow), ErrClosed, storage.
func (db *DB) NextSequence(ctx context.Context, name string, n uint64) (uint64, error) {
	if name == "" || len(name) > 256 {
		return 0, fmt.Errorf("%w: sequence name must be 1..256 bytes, got %d", ErrInvalid, len(name))
	}
	if n == 0 {
		return 0, fmt.Errorf("%w: sequence %q: n must be >= 1", ErrInvalid, name)
	}
	db.seqMu.Lock()
	s := db.seqs[name]
	if s == nil {
		s = &seqState{}
		db.seqs[name] = s
	}
	db.seqMu.Unlock()

	s.mu.Lock()
	defer s.mu.Unlock()
	key := []byte(seqPrefix + name)
	if !s.loaded {
		var limit uint64 = 1
		err := db.View(ctx, func(r Reader) error {
			raw, _, err := r.Get(key)
			if errors.Is(err, ErrNotFound) {
				return nil
			}
			if err != nil {
				return err
			}
			limit, err = decodeSeq(key, raw)
			return err
		})
		if err != nil {
			return 0, fmt.Errorf("catalog: load sequence %q: %w", name, err)
		}
		s.next, s.limit, s.loaded = limit, limit, true
	}
	if n > math.MaxUint64-s.next {
		return 0, fmt.Errorf("%w: sequence %q exhausted (next %d, n %d)", ErrInvalid, name, s.next, n)
	}
	if s.next+n > s.limit {
		grow := max(n, db.opts.SequenceBlock)
		if grow > math.MaxUint64-s.next {
			grow = n
		}
		newLimit := s.next + grow
		if _, err := db.c.commit(ctx, &Batch{Ops: []Op{{Key: key, Value: encodeSeq(newLimit)}}}, true); err != nil {
			return 0, fmt.Errorf("catalog: reserve sequence %q: %w", name, err)
		}
		s.limit = newLimit
	}
	first := s.next
	s.next += n
	return first, nil
}

// SequenceKey is the record under which the named sequence keeps its
// durable reservation limit. Other backends (runtime/catalog/etcdcat) use
// the same key and codec, so a backup carries sequences across backends.
func SequenceKey(name string) []byte { return []byte(seqPrefix + name) }

// EncodeSequence encodes a sequence record holding limit, the next value
// never handed out.
func EncodeSequence(limit uint64) []byte { return encodeSeq(limit) }

// DecodeSequence decodes a sequence record; errors are *DecodeError naming
// key.
func DecodeSequence(key, raw []byte) (uint64, error) { return decodeSeq(key, raw) }

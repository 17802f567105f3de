package catalog

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
)

// Tracked is a Reader that records what it read, so the reads can become a
// Batch's optimistic conditions: every Get becomes a Check (version 0 for an
// absent key) and every Scan a RangeCheck over the part of the range it
// covered. It is safe for concurrent use. Use it only while the snapshot it
// wraps is open.
type Tracked struct {
	r      Reader
	mu     sync.Mutex
	order  []string
	checks map[string]Version
	ranges []RangeCheck
}

var _ Reader = (*Tracked)(nil)

// NewTracked wraps r.
func NewTracked(r Reader) *Tracked {
	return &Tracked{r: r, checks: map[string]Version{}}
}

// Get reads key from the snapshot and records a Check on it.
func (t *Tracked) Get(key []byte) ([]byte, Version, error) {
	v, ver, err := t.r.Get(key)
	if err != nil && !errors.Is(err, ErrNotFound) {
		return nil, 0, err
	}
	t.mu.Lock()
	if _, ok := t.checks[string(key)]; !ok {
		t.order = append(t.order, string(key))
		t.checks[string(key)] = ver
	}
	t.mu.Unlock()
	return v, ver, err
}

// Scan scans the snapshot and records a RangeCheck. When fn stops the scan
// early (ErrStop or an error), the check covers only start up to and
// including the last key fn was given.
func (t *Tracked) Scan(start, end []byte, fn func(KV) error) error {
	var seen []KeyVersion
	stopped := false
	err := t.r.Scan(start, end, func(kv KV) error {
		seen = append(seen, KeyVersion{Key: bytes.Clone(kv.Key), Version: kv.Version})
		err := fn(kv)
		if err != nil {
			stopped = true
		}
		return err
	})
	rc := RangeCheck{Start: bytes.Clone(start), End: bytes.Clone(end), Seen: seen}
	if stopped && len(seen) > 0 {
		last := seen[len(seen)-1].Key
		rc.End = append(bytes.Clone(last), 0) // the smallest key after last
	}
	t.mu.Lock()
	t.ranges = append(t.ranges, rc)
	t.mu.Unlock()
	return err
}

// Checks returns the conditions recorded so far: Gets in first-read order
// and Scans in call order.
func (t *Tracked) Checks() ([]Check, []RangeCheck) {
	t.mu.Lock()
	defer t.mu.Unlock()
	checks := make([]Check, 0, len(t.order))
	for _, k := range t.order {
		checks = append(checks, Check{Key: []byte(k), Version: t.checks[k]})
	}
	return checks, append([]RangeCheck(nil), t.ranges...)
}

// Batch returns a Batch of ops conditioned on everything read so far.
func (t *Tracked) Batch(ops []Op) *Batch {
	c, rc := t.Checks()
	return &Batch{Checks: c, RangeChecks: rc, Ops: ops}
}

// UpdateAttempts is how many times Update runs fn before giving up on
// conflicts.
const UpdateAttempts = 16

// Update runs fn on a fresh snapshot through a Tracked reader and commits
// the ops it returns conditioned on everything fn read. When a concurrent
// writer changed what fn read (ErrConflict), Update runs fn again on a new
// snapshot, up to UpdateAttempts times; after that the error wraps
// ErrConflict and says how many attempts were made. fn must not have side
// effects outside its return value. fn returning no ops commits nothing.
// An error from fn is returned as is.
func Update(ctx context.Context, s Store, fn func(r *Tracked) ([]Op, error)) error {
	_, err := UpdateVersion(ctx, s, fn)
	return err
}

// UpdateVersion is Update that also returns the committed version (0 when
// fn returned no ops).
func UpdateVersion(ctx context.Context, s Store, fn func(r *Tracked) ([]Op, error)) (Version, error) {
	var last error
	for attempt := 1; attempt <= UpdateAttempts; attempt++ {
		var b *Batch
		err := s.View(ctx, func(r Reader) error {
			t := NewTracked(r)
			ops, err := fn(t)
			if err != nil {
				return err
			}
			if len(ops) > 0 {
				b = t.Batch(ops)
			}
			return nil
		})
		if err != nil || b == nil {
			return 0, err
		}
		ver, err := s.Commit(ctx, b)
		if err == nil {
			return ver, nil
		}
		if !errors.Is(err, ErrConflict) {
			return 0, err
		}
		last = err
		if err := ctx.Err(); err != nil {
			return 0, err
		}
	}
	return 0, fmt.Errorf("catalog: update gave up after %d attempts, each conflicting with a concurrent writer; last: %w", UpdateAttempts, last)
}

package wasm

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/hostd-dev/hostd/runtime/catalog"
	"github.com/hostd-dev/hostd/sdk/abi"
)

// Plugin KV lives in the catalog under catalog.NSPluginKV + <plugin> + "/".
//
// An ack callback's session stages its writes (reads see them) and records
// what it read: a Check per key read from the catalog (version 0 = was
// absent) and a RangeCheck per scan. The caller commits Checks, RangeChecks
// and Ops in one catalog batch with its own state change, so the effects of
// a callback happen exactly once, and a concurrent change to anything the
// callback read makes the commit fail with catalog.ErrConflict (re-run the
// callback). Validators, resource-key functions and policies get read-only
// sessions (from the caller's snapshot when it gives one).

var (
	errReadOnly    = errors.New("plugin KV is read-only in this handler (only ack callbacks may write)")
	errQuota       = errors.New("plugin KV quota exceeded")
	errUnavailable = errors.New("plugin KV is unavailable (no catalog configured)")
)

func statusOf(err error) abi.Status {
	switch {
	case errors.Is(err, errReadOnly):
		return abi.StatusReadOnly
	case errors.Is(err, errQuota):
		return abi.StatusQuota
	}
	return abi.StatusUnavailable
}

// NamespacePrefix returns the catalog key prefix of plugin's KV.
func NamespacePrefix(plugin string) []byte {
	return []byte(catalog.NSPluginKV + plugin + "/")
}

// prefixEnd returns the least key greater than every key with prefix p
// (nil if none).
func prefixEnd(p []byte) []byte {
	end := append([]byte(nil), p...)
	for i := len(end) - 1; i >= 0; i-- {
		if end[i] < 0xff {
			end[i]++
			return end[:i+1]
		}
	}
	return nil
}

type staged struct {
	value   []byte
	deleted bool
}

type kvSession struct {
	store    catalog.Store
	snap     catalog.Reader // read-only sessions may read from the caller's snapshot
	ns       []byte
	writable bool
	usage    *usage
	limits   *Limits

	checks  map[string]catalog.Version // first version read per full key
	order   []string                   // check keys in read order
	ranges  []catalog.RangeCheck
	writes  map[string]staged // full key -> staged write
	worder  []string
	dKeys   int64           // staged change in key count
	dBytes  int64           // staged change in key+value bytes
	baseLen map[string]int  // full key -> committed value length (-1 absent)
	fences  []catalog.Check // fence checks of fenced puts (kv_put_fenced)
}

// addFence records the fence check of a fenced put (once per check).
func (s *kvSession) addFence(c catalog.Check) {
	for _, f := range s.fences {
		if bytes.Equal(f.Key, c.Key) && f.Version == c.Version {
			return
		}
	}
	s.fences = append(s.fences, c)
}

func newSession(store catalog.Store, snap catalog.Reader, ns []byte, writable bool, u *usage, l *Limits) *kvSession {
	return &kvSession{store: store, snap: snap, ns: ns, writable: writable, usage: u, limits: l}
}

func (s *kvSession) view(ctx context.Context, fn func(catalog.Reader) error) error {
	if s.snap != nil {
		return fn(s.snap)
	}
	if s.store == nil {
		return errUnavailable
	}
	return s.store.View(ctx, fn)
}

func (s *kvSession) full(key []byte) []byte {
	k := make([]byte, 0, len(s.ns)+len(key))
	return append(append(k, s.ns...), key...)
}

// base reads key from the catalog, recording the read.
func (s *kvSession) base(ctx context.Context, fk []byte) ([]byte, bool, error) {
	var val []byte
	var ver catalog.Version
	err := s.view(ctx, func(r catalog.Reader) error {
		v, vv, err := r.Get(fk)
		if errors.Is(err, catalog.ErrNotFound) {
			return nil
		}
		val, ver = v, vv
		return err
	})
	if err != nil {
		return nil, false, err
	}
	if s.writable {
		if s.checks == nil {
			s.checks, s.baseLen = map[string]catalog.Version{}, map[string]int{}
		}
		if _, seen := s.checks[string(fk)]; !seen {
			s.checks[string(fk)] = ver
			s.order = append(s.order, string(fk))
			if ver == 0 {
				s.baseLen[string(fk)] = -1
			} else {
				s.baseLen[string(fk)] = len(val)
			}
		}
	}
	return val, ver != 0, nil
}

func (s *kvSession) get(ctx context.Context, key []byte) ([]byte, bool, error) {
	fk := s.full(key)
	if w, ok := s.writes[string(fk)]; ok {
		return w.value, !w.deleted, nil
	}
	return s.base(ctx, fk)
}

func (s *kvSession) put(ctx context.Context, key, value []byte, del bool) error {
	if !s.writable {
		return errReadOnly
	}
	if s.store == nil {
		return errUnavailable
	}
	fk := s.full(key)
	after := -1
	if !del {
		after = len(value)
	}
	// A put does not read the catalog: a write that was not read is not a
	// checked read, and the quota is first checked assuming every key whose
	// committed size is unknown was absent (an upper bound on the usage).
	// Only when that bound exceeds a limit are the unknown sizes read, and
	// the write is then checked exactly.
	dk, db := s.delta(fk, after)
	if s.overQuota(ctx, dk, db) != nil {
		if err := s.resolve(ctx, fk); err != nil {
			return err
		}
		dk, db = s.delta(fk, after)
		if err := s.overQuota(ctx, dk, db); err != nil {
			return err
		}
	}
	s.dKeys += dk
	s.dBytes += db
	if s.writes == nil {
		s.writes = map[string]staged{}
	}
	if _, ok := s.writes[string(fk)]; !ok {
		s.worder = append(s.worder, string(fk))
	}
	s.writes[string(fk)] = staged{value: append([]byte(nil), value...), deleted: del}
	return nil
}

// sizeDelta is the change in key count and key+value bytes when full key
// fk goes from a value of size before to one of size after (-1 = absent).
func sizeDelta(fk string, before, after int) (int64, int64) {
	switch {
	case before < 0 && after >= 0:
		return 1, int64(len(fk) + after)
	case before >= 0 && after < 0:
		return -1, -int64(len(fk) + before)
	case before >= 0:
		return 0, int64(after - before)
	}
	return 0, 0
}

// delta is the usage change of writing fk (after = -1: delete) from the
// session's current view of it: the staged value, else the committed size
// if known, else assumed absent.
func (s *kvSession) delta(fk []byte, after int) (int64, int64) {
	before := -1
	if w, ok := s.writes[string(fk)]; ok {
		if !w.deleted {
			before = len(w.value)
		}
	} else if n, ok := s.baseLen[string(fk)]; ok {
		before = n
	}
	return sizeDelta(string(fk), before, after)
}

// overQuota reports (errQuota) whether the committed usage plus the staged
// delta plus (dk, db) exceeds a limit. A write that does not grow usage
// always fits.
func (s *kvSession) overQuota(ctx context.Context, dk, db int64) error {
	if dk <= 0 && db <= 0 {
		return nil
	}
	keys, bytes, err := s.usage.get(ctx, s.store, s.ns)
	if err != nil {
		return err
	}
	if nk := keys + s.dKeys + dk; nk > s.limits.KVMaxKeys {
		return fmt.Errorf("%w: %d keys would exceed the limit of %d", errQuota, nk, s.limits.KVMaxKeys)
	}
	if nb := bytes + s.dBytes + db; nb > s.limits.KVMaxBytes {
		return fmt.Errorf("%w: %d bytes would exceed the limit of %d", errQuota, nb, s.limits.KVMaxBytes)
	}
	return nil
}

// resolve reads the committed size of fk and of every staged key whose
// committed size is not known yet (each becomes a checked read), and
// recomputes the staged delta exactly.
func (s *kvSession) resolve(ctx context.Context, fk []byte) error {
	for _, k := range append(append(make([]string, 0, len(s.worder)+1), s.worder...), string(fk)) {
		if _, known := s.baseLen[k]; known {
			continue
		}
		if _, _, err := s.base(ctx, []byte(k)); err != nil {
			return err
		}
	}
	s.dKeys, s.dBytes = 0, 0
	for _, k := range s.worder {
		after := -1
		if w := s.writes[k]; !w.deleted {
			after = len(w.value)
		}
		dk, db := sizeDelta(k, s.baseLen[k], after)
		s.dKeys += dk
		s.dBytes += db
	}
	return nil
}

// scan returns up to limit entries with the prefix, after `after`, merged
// with staged writes, and records the scanned range.
func (s *kvSession) scan(ctx context.Context, prefix, after []byte, limit int) (abi.KVList, error) {
	fp := s.full(prefix)
	start := fp
	if len(after) > 0 {
		fa := s.full(after)
		if bytes.Compare(fa, fp) >= 0 {
			start = append(fa, 0)
		}
	}
	end := prefixEnd(fp)
	inRange := func(k string) bool {
		return k >= string(start) && (end == nil || k < string(end))
	}
	var stagedIn []string
	for _, k := range s.worder {
		if inRange(k) {
			stagedIn = append(stagedIn, k)
		}
	}
	want := limit + len(stagedIn) + 1
	var base []catalog.KV
	err := s.view(ctx, func(r catalog.Reader) error {
		return r.Scan(start, end, func(kv catalog.KV) error {
			if err := ctx.Err(); err != nil {
				return err
			}
			base = append(base, kv)
			if len(base) >= want {
				return catalog.ErrStop
			}
			return nil
		})
	})
	if err != nil {
		return abi.KVList{}, err
	}
	merged := map[string][]byte{}
	for _, kv := range base {
		merged[string(kv.Key)] = kv.Value
	}
	for _, k := range stagedIn {
		w := s.writes[k]
		if w.deleted {
			delete(merged, k)
		} else {
			merged[k] = w.value
		}
	}
	keys := make([]string, 0, len(merged))
	for k := range merged {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var l abi.KVList
	checkEnd := end
	if len(keys) > limit {
		keys = keys[:limit]
		l.More = true
		checkEnd = append([]byte(keys[limit-1]), 0)
	}
	l.Entries = make([]abi.KVPair, len(keys))
	for i, k := range keys {
		l.Entries[i] = abi.KVPair{Key: []byte(k[len(s.ns):]), Value: merged[k]}
	}
	if s.writable {
		rc := catalog.RangeCheck{Start: start, End: checkEnd}
		for _, kv := range base {
			if checkEnd == nil || bytes.Compare(kv.Key, checkEnd) < 0 {
				rc.Seen = append(rc.Seen, catalog.KeyVersion{Key: kv.Key, Version: kv.Version})
			}
		}
		s.ranges = append(s.ranges, rc)
	}
	return l, nil
}

// result returns the session's reads and staged writes.
func (s *kvSession) result(plugin string) *AckResult {
	res := &AckResult{Plugin: plugin}
	for _, k := range s.order {
		res.Checks = append(res.Checks, catalog.Check{Key: []byte(k), Version: s.checks[k]})
	}
	// Fenced puts: the grant must still be current when the batch commits.
	res.Checks = append(res.Checks, s.fences...)
	res.RangeChecks = s.ranges
	for _, k := range s.worder {
		w := s.writes[k]
		res.Ops = append(res.Ops, catalog.Op{Key: []byte(k), Value: w.value, Delete: w.deleted})
	}
	return res
}

// usage is a plugin's committed KV usage, refreshed by a scan at most once
// per refresh interval. Quotas compare against it plus the session's staged
// delta, so concurrent callbacks may together overshoot by what they write
// within one interval.
type usage struct {
	mu      sync.Mutex
	refresh time.Duration
	at      time.Time
	keys    int64
	bytes   int64
}

func (u *usage) get(ctx context.Context, store catalog.Store, ns []byte) (int64, int64, error) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if !u.at.IsZero() && time.Since(u.at) < u.refresh {
		return u.keys, u.bytes, nil
	}
	var keys, size int64
	err := store.View(ctx, func(r catalog.Reader) error {
		return r.Scan(ns, prefixEnd(ns), func(kv catalog.KV) error {
			keys++
			size += int64(len(kv.Key) + len(kv.Value))
			return nil
		})
	})
	if err != nil {
		return 0, 0, err
	}
	u.keys, u.bytes, u.at = keys, size, time.Now()
	return keys, size, nil
}

package wasm

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"sort"

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

// keyState is the committed state of a key as a session learned it: its
// value's size (-1 = absent) and version (0 = absent).
type keyState struct {
	size int
	ver  catalog.Version
}

type kvSession struct {
	store    catalog.Store
	snap     catalog.Reader // read-only sessions may read from the caller's snapshot
	ns       []byte
	writable bool
	limits   *Limits

	checks map[string]catalog.Version // first version read per full key (guest reads)
	order  []string                   // check keys in read order
	ranges []catalog.RangeCheck
	writes map[string]staged // full key -> staged write
	worder []string
	known  map[string]keyState // committed state of every key read or written
	fences []catalog.Check     // fence checks of fenced puts (kv_put_fenced)

	// The namespace's usage record as read before the first write (see
	// usage below), and the staged change to it.
	usageRead     bool
	usageVer      catalog.Version
	baseKeys      int64
	baseBytes     int64
	dKeys, dBytes int64
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

func newSession(store catalog.Store, snap catalog.Reader, ns []byte, writable bool, l *Limits) *kvSession {
	return &kvSession{store: store, snap: snap, ns: ns, writable: writable, limits: l}
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

func (s *kvSession) learn(fk string, val []byte, ver catalog.Version) {
	if s.known == nil {
		s.known = map[string]keyState{}
	}
	if _, ok := s.known[fk]; ok {
		return
	}
	st := keyState{size: -1}
	if ver != 0 {
		st = keyState{size: len(val), ver: ver}
	}
	s.known[fk] = st
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
			s.checks = map[string]catalog.Version{}
		}
		if _, seen := s.checks[string(fk)]; !seen {
			s.checks[string(fk)] = ver
			s.order = append(s.order, string(fk))
		}
		s.learn(string(fk), val, ver)
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
	if err := s.prepare(ctx, fk); err != nil {
		return err
	}
	after := -1
	if !del {
		after = len(value)
	}
	dk, db := s.delta(fk, after)
	if err := s.overQuota(dk, db); err != nil {
		return err
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

// prepare reads, in one snapshot, what a write of fk needs to be counted
// exactly: the namespace's usage record (first write of the session only,
// so it is always read before any committed size the session relies on)
// and the committed size of fk (unless already known). The size read is
// not a guest read and adds no check of its own (see result).
func (s *kvSession) prepare(ctx context.Context, fk []byte) error {
	_, known := s.known[string(fk)]
	if s.usageRead && known {
		return nil
	}
	return s.view(ctx, func(r catalog.Reader) error {
		if !s.usageRead {
			u, err := readUsage(r, s.ns)
			if err != nil {
				return err
			}
			s.usageRead, s.usageVer, s.baseKeys, s.baseBytes = true, u.ver, u.keys, u.bytes
		}
		if known {
			return nil
		}
		v, ver, err := r.Get(fk)
		if err != nil && !errors.Is(err, catalog.ErrNotFound) {
			return err
		}
		s.learn(string(fk), v, ver)
		return nil
	})
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
// session's current view of it: the staged value, else the committed size.
func (s *kvSession) delta(fk []byte, after int) (int64, int64) {
	before := s.known[string(fk)].size
	if w, ok := s.writes[string(fk)]; ok {
		before = -1
		if !w.deleted {
			before = len(w.value)
		}
	}
	return sizeDelta(string(fk), before, after)
}

// overQuota reports (errQuota) whether the usage read by the session plus
// the staged delta plus (dk, db) exceeds a limit. A write that does not
// grow usage always fits.
func (s *kvSession) overQuota(dk, db int64) error {
	if dk <= 0 && db <= 0 {
		return nil
	}
	if nk := s.baseKeys + s.dKeys + dk; nk > s.limits.KVMaxKeys {
		return fmt.Errorf("%w: %d keys would exceed the limit of %d", errQuota, nk, s.limits.KVMaxKeys)
	}
	if nb := s.baseBytes + s.dBytes + db; nb > s.limits.KVMaxBytes {
		return fmt.Errorf("%w: %d bytes would exceed the limit of %d", errQuota, nb, s.limits.KVMaxBytes)
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
	if end != nil && bytes.Compare(start, end) >= 0 {
		// after sorts past every key with the prefix: nothing can be in
		// the range, so there is nothing to return or to re-check.
		return abi.KVList{}, nil
	}
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
//
// Quotas are enforced by the commit, not by the snapshot a call read: a
// session whose writes change the namespace's usage (a key created or
// deleted, a value resized) carries the usage record's new value as one
// more Op, checked at the version it read, so of two concurrent callbacks
// that both grow one plugin's KV only the first commits; the other
// conflicts, runs again, and then sees the new usage (and the quota). A
// session whose every write keeps its key's size instead checks each
// written key at the version whose size it relied on (writes that change
// no size never touch the usage record, so they do not conflict with
// each other through it). Sessions that write nothing add nothing.
func (s *kvSession) result(plugin string) *AckResult {
	res := &AckResult{Plugin: plugin}
	for _, k := range s.order {
		res.Checks = append(res.Checks, catalog.Check{Key: []byte(k), Version: s.checks[k]})
	}
	// Fenced puts: the grant must still be current when the batch commits.
	res.Checks = append(res.Checks, s.fences...)
	res.RangeChecks = s.ranges
	var dk, db int64
	changed := false
	for _, k := range s.worder {
		w := s.writes[k]
		res.Ops = append(res.Ops, catalog.Op{Key: []byte(k), Value: w.value, Delete: w.deleted})
		after := -1
		if !w.deleted {
			after = len(w.value)
		}
		kd, bd := sizeDelta(k, s.known[k].size, after)
		changed = changed || kd != 0 || bd != 0
		dk += kd
		db += bd
	}
	if changed {
		uk := usageKey(s.ns)
		res.Checks = append(res.Checks, catalog.Check{Key: uk, Version: s.usageVer})
		res.Ops = append(res.Ops, catalog.Op{Key: uk, Value: encodeUsage(s.baseKeys+dk, s.baseBytes+db)})
		return res
	}
	for _, k := range s.worder {
		if _, read := s.checks[k]; !read {
			res.Checks = append(res.Checks, catalog.Check{Key: []byte(k), Version: s.known[k].ver})
		}
	}
	return res
}

// The usage record of a plugin's KV namespace "pkv/<plugin>/" is the key
// "pkv/<plugin>" (no slash: outside every plugin's namespace, since plugin
// names have no slash). It holds the exact key count and key+value bytes of
// the namespace as of its version, and every write to the namespace that
// changes either (ack callbacks, operators' and lease holders' writes
// through the API) updates it in the same commit, checked at the version it
// read. A namespace without a record (data from before records existed) is
// counted by a scan; the first write creates the record, checked absent.
//
// Encoding: u8 version (1) · u64 keys · u64 bytes, little-endian.

type usage struct {
	ver         catalog.Version
	keys, bytes int64
}

func usageKey(ns []byte) []byte { return append([]byte(nil), ns[:len(ns)-1]...) }

func encodeUsage(keys, size int64) []byte {
	b := make([]byte, 17)
	b[0] = 1
	binary.LittleEndian.PutUint64(b[1:], uint64(max(keys, 0)))
	binary.LittleEndian.PutUint64(b[9:], uint64(max(size, 0)))
	return b
}

func decodeUsage(b []byte) (keys, size int64, ok bool) {
	if len(b) != 17 || b[0] != 1 {
		return 0, 0, false
	}
	k, n := binary.LittleEndian.Uint64(b[1:]), binary.LittleEndian.Uint64(b[9:])
	if k > math.MaxInt64 || n > math.MaxInt64 {
		return 0, 0, false
	}
	return int64(k), int64(n), true
}

// readUsage returns the usage of namespace ns as of r: the record, or,
// when it is absent or does not decode, a count by scan (with the version
// of what is there, so that the write replacing it is checked against it).
func readUsage(r catalog.Reader, ns []byte) (usage, error) {
	v, ver, err := r.Get(usageKey(ns))
	if err != nil && !errors.Is(err, catalog.ErrNotFound) {
		return usage{}, err
	}
	u := usage{ver: ver}
	if ver != 0 {
		if k, n, ok := decodeUsage(v); ok {
			u.keys, u.bytes = k, n
			return u, nil
		}
	}
	err = r.Scan(ns, prefixEnd(ns), func(kv catalog.KV) error {
		u.keys++
		u.bytes += int64(len(kv.Key) + len(kv.Value))
		return nil
	})
	return u, err
}

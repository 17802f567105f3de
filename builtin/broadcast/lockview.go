package broadcast

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/hostd-dev/hostd/sdk/abi"
)

// The operator's view of broadcast resource-key locks. The engine knows
// who holds what (every PENDING task keeps its guard on its keys, from
// step 2 to step 8) and who waits (lockWait entries, registered around
// each Locker.Lock of Submit and Retry), so it can answer "who holds
// collection:shop.orders?" with broadcast IDs — the Locker only knows the
// owner "broadcast".

// KeyLock is one resource key held or awaited by broadcasts.
type KeyLock struct {
	Domain  string       `json:"domain"`
	Key     string       `json:"key"`
	Mode    abi.LockMode `json:"mode"` // exclusive if a holder holds it exclusively
	Holders []KeyHolder  `json:"holders"`
	Waiters []KeyWaiter  `json:"waiters,omitempty"`
}

// KeyHolder is a broadcast holding a key.
type KeyHolder struct {
	BroadcastID uint64       `json:"broadcast_id"`
	Type        string       `json:"type"`
	Mode        abi.LockMode `json:"mode"`
	Since       time.Time    `json:"since"` // the task's creation
}

// KeyWaiter is a request waiting for a key (in the order they started
// waiting). BroadcastID is set for an admin retry (a new broadcast has no
// ID before its locks). BlockedHere is true on the key it waits for.
type KeyWaiter struct {
	BroadcastID uint64       `json:"broadcast_id,omitempty"`
	Type        string       `json:"type"`
	Mode        abi.LockMode `json:"mode"`
	Since       time.Time    `json:"since"`
	BlockedHere bool         `json:"blocked_here"`
}

// LockFilter selects keys for Locks: Domain alone, or Domain and Key.
// Zero matches every key.
type LockFilter struct {
	Domain string
	Key    string
}

// lockWait is one Locker.Lock call in progress.
type lockWait struct {
	id    uint64 // broadcast ID of a retry, else 0
	typ   string
	keys  []abi.ResourceKey // canonical
	since time.Time
}

// LockWaitError says what a broadcast was waiting for when its wait for
// resource keys ended: the key it was blocked on and the broadcasts
// holding it (empty if it was queued behind an earlier waiter). It wraps
// the cause (ctx's error, ErrClosed…).
type LockWaitError struct {
	Key     abi.ResourceKey
	Holders []uint64
	Err     error
}

func (e *LockWaitError) Error() string {
	held := "queued behind an earlier waiter"
	if len(e.Holders) > 0 {
		ids := make([]string, len(e.Holders))
		for i, id := range e.Holders {
			ids[i] = fmt.Sprint(id)
		}
		held = "held by broadcast " + strings.Join(ids, ", ")
	}
	return fmt.Sprintf("broadcast: waiting for resource key %s:%s (%s, %s): %v", e.Key.Domain, e.Key.Key, e.Key.Mode, held, e.Err)
}

func (e *LockWaitError) Unwrap() error { return e.Err }

// canonicalKeys dedupes keys (exclusive wins over shared on one key) and
// sorts them by (domain, key), the order the Locker takes them in.
func canonicalKeys(keys []abi.ResourceKey) []abi.ResourceKey {
	m := make(map[[2]string]abi.LockMode, len(keys))
	for _, k := range keys {
		id := [2]string{k.Domain, k.Key}
		if old, ok := m[id]; !ok || old != abi.Exclusive {
			m[id] = k.Mode
		}
	}
	out := make([]abi.ResourceKey, 0, len(m))
	for id, mode := range m {
		out = append(out, abi.ResourceKey{Domain: id[0], Key: id[1], Mode: mode})
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Domain != out[j].Domain {
			return out[i].Domain < out[j].Domain
		}
		return out[i].Key < out[j].Key
	})
	return out
}

func lockConflict(a, b abi.LockMode) bool { return a == abi.Exclusive || b == abi.Exclusive }

// addLockWait registers a Lock call in progress; removeLockWait ends it.
func (e *Engine) addLockWait(id uint64, typ string, keys []abi.ResourceKey) *lockWait {
	w := &lockWait{id: id, typ: typ, keys: canonicalKeys(keys), since: e.o.Clock.Now()}
	e.mu.Lock()
	e.lockWaits[w] = struct{}{}
	e.mu.Unlock()
	return w
}

func (e *Engine) removeLockWait(w *lockWait) {
	e.mu.Lock()
	delete(e.lockWaits, w)
	e.mu.Unlock()
}

type heldKey struct {
	t    *task
	mode abi.LockMode
	at   time.Time
}

// holdersLocked maps each key held by a task to its holders. Must hold
// e.mu.
func (e *Engine) holdersLocked() map[[2]string][]heldKey {
	out := map[[2]string][]heldKey{}
	for _, t := range e.tasks {
		t.mu.Lock()
		if t.guard != nil {
			for _, k := range canonicalKeys(t.rec.Keys) {
				id := [2]string{k.Domain, k.Key}
				out[id] = append(out[id], heldKey{t, k.Mode, t.rec.CreatedAt})
			}
		}
		t.mu.Unlock()
	}
	return out
}

// blockedOnLocked returns the key w waits for: the first of its keys
// (in lock order) held in a conflicting mode, with its holders; else the
// first wanted in a conflicting mode by an earlier waiter (no holders).
// ok is false if nothing blocks it (it is being granted). Must hold e.mu.
func (e *Engine) blockedOnLocked(w *lockWait, held map[[2]string][]heldKey) (abi.ResourceKey, []uint64, bool) {
	for _, k := range w.keys {
		var ids []uint64
		for _, h := range held[[2]string{k.Domain, k.Key}] {
			if lockConflict(h.mode, k.Mode) {
				ids = append(ids, h.t.tid)
			}
		}
		if len(ids) > 0 {
			slices.Sort(ids)
			return k, ids, true
		}
	}
	for _, k := range w.keys {
		for o := range e.lockWaits {
			if o == w || !o.since.Before(w.since) {
				continue
			}
			for _, ok := range o.keys {
				if ok.Domain == k.Domain && ok.Key == k.Key && lockConflict(ok.Mode, k.Mode) {
					return k, nil, true
				}
			}
		}
	}
	return abi.ResourceKey{}, nil, false
}

// lockWaitError wraps a failed Lock's error with what w was blocked on.
// Call before removeLockWait.
func (e *Engine) lockWaitError(w *lockWait, err error) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	k, ids, ok := e.blockedOnLocked(w, e.holdersLocked())
	if !ok {
		return err
	}
	return &LockWaitError{Key: k, Holders: ids, Err: err}
}

// Locks returns the broadcast resource keys that are held or awaited,
// sorted by (domain, key): holders by broadcast ID, waiters in the order
// they started waiting, each waiter marked on the key it is blocked on.
func (e *Engine) Locks(f LockFilter) []KeyLock {
	match := func(d, k string) bool {
		return (f.Domain == "" || f.Domain == d) && (f.Key == "" || f.Key == k)
	}
	e.mu.Lock()
	held := e.holdersLocked()
	byKey := map[[2]string]*KeyLock{}
	get := func(d, k string) *KeyLock {
		id := [2]string{d, k}
		kl := byKey[id]
		if kl == nil {
			kl = &KeyLock{Domain: d, Key: k, Mode: abi.Shared, Holders: []KeyHolder{}}
			byKey[id] = kl
		}
		return kl
	}
	for id, hs := range held {
		if !match(id[0], id[1]) {
			continue
		}
		kl := get(id[0], id[1])
		for _, h := range hs {
			kl.Holders = append(kl.Holders, KeyHolder{BroadcastID: h.t.tid, Type: h.t.typ, Mode: h.mode, Since: h.at})
			if h.mode == abi.Exclusive {
				kl.Mode = abi.Exclusive
			}
		}
		sort.Slice(kl.Holders, func(i, j int) bool { return kl.Holders[i].BroadcastID < kl.Holders[j].BroadcastID })
	}
	waits := make([]*lockWait, 0, len(e.lockWaits))
	for w := range e.lockWaits {
		waits = append(waits, w)
	}
	sort.Slice(waits, func(i, j int) bool { return waits[i].since.Before(waits[j].since) })
	for _, w := range waits {
		bk, _, _ := e.blockedOnLocked(w, held)
		for _, k := range w.keys {
			if !match(k.Domain, k.Key) {
				continue
			}
			kl := get(k.Domain, k.Key)
			kl.Waiters = append(kl.Waiters, KeyWaiter{BroadcastID: w.id, Type: w.typ, Mode: k.Mode, Since: w.since,
				BlockedHere: bk.Domain == k.Domain && bk.Key == k.Key})
		}
	}
	e.mu.Unlock()
	out := make([]KeyLock, 0, len(byKey))
	for _, kl := range byKey {
		out = append(out, *kl)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Domain != out[j].Domain {
			return out[i].Domain < out[j].Domain
		}
		return out[i].Key < out[j].Key
	})
	return out
}

package locks

import (
	"context"
	"fmt"
	"math"
	"sort"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/noop"

	"github.com/hostd-dev/hostd/runtime/sched"
	"github.com/hostd-dev/hostd/sdk/abi"
)

// KeyLockerOptions configures a KeyLocker. The zero value is usable.
type KeyLockerOptions struct {
	// Clock measures how long requests wait (metrics, snapshots).
	// Default: sched.Real.
	Clock sched.Clock
	// MeterProvider receives the locker's metrics. Default: no metrics.
	MeterProvider metric.MeterProvider
	// Name distinguishes several lockers in metrics (attribute
	// "locker"). Default: "resource".
	Name string
}

// KeyLocker is the in-process resource-key locker: shared/exclusive locks
// on canonical sets of keys, taken all-or-nothing, granted fairly.
//
// Locking: one mutex (mu) guards all state. A request's keys are checked
// and taken in one critical section, so there is no lock order between
// keys and opposite-order multi-key requests cannot deadlock.
//
// Fairness: every waiter gets a ticket (seq) when it queues. A request is
// granted when it is compatible with the current holders of all its keys
// and no waiter with an earlier ticket wants one of its keys in a
// conflicting mode. So a writer queued behind readers blocks later readers
// (no writer starvation), and the earliest waiter is only ever blocked by
// holders, which guarantees progress.
type KeyLocker struct {
	clock sched.Clock
	m     keyLockerMetrics

	mu      sync.Mutex
	keys    map[keyID]*keyState
	seq     uint64      // last waiter ticket handed out
	guardID uint64      // last guard id handed out
	waiters int         // number of queued waiters
	free    []*keyState // idle states kept for reuse
	closed  bool
}

type keyID struct{ domain, key string }

type keyState struct {
	holders []*Guard // current holders; len 1 if excl
	excl    bool
	queue   []queued // waiters on this key, in ticket order
}

type queued struct {
	w    *waiter
	mode abi.LockMode
}

type waiter struct {
	seq   uint64
	owner string
	keys  []abi.ResourceKey
	since time.Time
	ready chan struct{} // closed once guard or err is set
	guard *Guard
	err   error
}

// Guard is a granted lock on a set of keys. Unlock releases all of them.
type Guard struct {
	l        *KeyLocker
	id       uint64
	owner    string
	keys     []abi.ResourceKey
	since    time.Time
	released bool // guarded by l.mu
}

// NewKeyLocker returns an empty locker.
func NewKeyLocker(opts KeyLockerOptions) *KeyLocker {
	if opts.Clock == nil {
		opts.Clock = sched.Real
	}
	if opts.Name == "" {
		opts.Name = "resource"
	}
	l := &KeyLocker{clock: opts.Clock, keys: make(map[keyID]*keyState)}
	l.m = newKeyLockerMetrics(opts.MeterProvider, opts.Name, l)
	return l
}

// Lock takes keys (canonicalized first) for owner, blocking until they are
// all granted together or ctx ends. A waiter whose ctx ends is removed
// from the queues and is never granted later; Lock then returns an error
// wrapping ctx.Err(). After Close, and for waiters queued when Close runs,
// it returns ErrClosed. Invalid keys (or none) give an *InvalidKeyError.
func (l *KeyLocker) Lock(ctx context.Context, owner string, keys []abi.ResourceKey) (*Guard, error) {
	ck, err := canonicalNonEmpty(keys)
	if err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("locks: lock %s: %w", formatKey(ck[0]), err)
	}
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return nil, ErrClosed
	}
	if l.grantable(math.MaxUint64, ck) < 0 {
		g := l.grantLocked(owner, ck)
		l.mu.Unlock()
		l.m.acquired(ctx, false, 0)
		return g, nil
	}
	l.seq++
	w := &waiter{seq: l.seq, owner: owner, keys: ck, since: l.clock.Now(), ready: make(chan struct{})}
	for _, k := range ck {
		st := l.state(k)
		st.queue = append(st.queue, queued{w: w, mode: k.Mode})
	}
	l.waiters++
	l.mu.Unlock()

	select {
	case <-w.ready:
	case <-ctx.Done():
		l.mu.Lock()
		select {
		case <-w.ready:
			// Granted (or closed) while we were being canceled: keep the
			// outcome rather than fix up the queues.
			l.mu.Unlock()
		default:
			// Name the key it actually waits for, not the first it wants.
			blk := ck[0]
			if i := l.grantable(w.seq, w.keys); i >= 0 {
				blk = ck[i]
			}
			l.dequeueLocked(w)
			l.wakeLocked(w.keys)
			l.mu.Unlock()
			l.m.canceled(ctx)
			return nil, fmt.Errorf("locks: waiting for %s: %w", formatKey(blk), ctx.Err())
		}
	}
	if w.err != nil {
		return nil, w.err
	}
	l.m.acquired(ctx, true, l.clock.Now().Sub(w.since))
	return w.guard, nil
}

// TryLock takes keys for owner only if that is possible at once: the keys
// are compatible with all holders and with every queued waiter (a queued
// writer blocks a new reader here too). Otherwise it returns a
// *ConflictError naming the first conflicting key (in canonical order) and
// the owners holding or queued for it.
func (l *KeyLocker) TryLock(owner string, keys []abi.ResourceKey) (*Guard, error) {
	ck, err := canonicalNonEmpty(keys)
	if err != nil {
		return nil, err
	}
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return nil, ErrClosed
	}
	if i := l.grantable(math.MaxUint64, ck); i >= 0 {
		cerr := l.conflictLocked(ck[i])
		l.mu.Unlock()
		l.m.conflict(context.Background())
		return nil, cerr
	}
	g := l.grantLocked(owner, ck)
	l.mu.Unlock()
	l.m.acquired(context.Background(), false, 0)
	return g, nil
}

// Close fails every queued waiter with ErrClosed and makes later Lock and
// TryLock calls fail the same way. Holders keep their guards; Unlock still
// works. Close is idempotent.
func (l *KeyLocker) Close() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return
	}
	l.closed = true
	seen := map[*waiter]bool{}
	for id, st := range l.keys {
		for _, q := range st.queue {
			if !seen[q.w] {
				seen[q.w] = true
				q.w.err = ErrClosed
				close(q.w.ready)
			}
		}
		st.queue = nil
		if len(st.holders) == 0 {
			delete(l.keys, id)
		}
	}
	l.waiters = 0
}

// Unlock releases every key of the guard and wakes the waiters it was
// blocking. It is idempotent and safe to call concurrently.
func (g *Guard) Unlock() {
	if g == nil {
		return
	}
	l := g.l
	l.mu.Lock()
	defer l.mu.Unlock()
	if g.released {
		return
	}
	g.released = true
	for _, k := range g.keys {
		id := keyID{k.Domain, k.Key}
		st := l.keys[id]
		if st == nil {
			continue
		}
		st.holders = removeHolder(st.holders, g)
		if len(st.holders) == 0 {
			st.excl = false
			if len(st.queue) == 0 {
				l.dropLocked(id, st)
			}
		}
	}
	l.wakeLocked(g.keys)
}

// Keys returns a copy of the guard's canonical keys.
func (g *Guard) Keys() []abi.ResourceKey { return append([]abi.ResourceKey(nil), g.keys...) }

// Owner returns the owner the guard was granted to.
func (g *Guard) Owner() string { return g.owner }

// ID returns the guard's locker-unique id.
func (g *Guard) ID() uint64 { return g.id }

// canonicalNonEmpty canonicalizes keys and rejects an empty set.
func canonicalNonEmpty(keys []abi.ResourceKey) ([]abi.ResourceKey, error) {
	ck, err := Canonicalize(keys)
	if err != nil {
		return nil, err
	}
	if len(ck) == 0 {
		return nil, &InvalidKeyError{Index: -1, Reason: "no keys"}
	}
	return ck, nil
}

func (l *KeyLocker) state(k abi.ResourceKey) *keyState {
	id := keyID{k.Domain, k.Key}
	st := l.keys[id]
	if st == nil {
		if n := len(l.free); n > 0 {
			st = l.free[n-1]
			l.free = l.free[:n-1]
		} else {
			st = &keyState{}
		}
		l.keys[id] = st
	}
	return st
}

// dropLocked deletes an idle key's state, keeping a few for reuse. Must
// hold mu.
func (l *KeyLocker) dropLocked(id keyID, st *keyState) {
	delete(l.keys, id)
	if len(l.free) < maxFreeStates {
		st.holders = st.holders[:0]
		st.queue = st.queue[:0]
		st.excl = false
		l.free = append(l.free, st)
	}
}

// maxFreeStates bounds the reuse list of idle key states.
const maxFreeStates = 256

// grantable returns -1 if a request with ticket seq for ck can be granted
// now, else the index of the first key that blocks it. Must hold mu.
func (l *KeyLocker) grantable(seq uint64, ck []abi.ResourceKey) int {
	for i, k := range ck {
		st := l.keys[keyID{k.Domain, k.Key}]
		if st == nil {
			continue
		}
		if st.excl || (k.Mode == abi.Exclusive && len(st.holders) > 0) {
			return i
		}
		for _, q := range st.queue {
			if q.w.seq >= seq {
				break
			}
			if conflicts(q.mode, k.Mode) {
				return i
			}
		}
	}
	return -1
}

// grantLocked records a new guard as holder of ck. Must hold mu.
func (l *KeyLocker) grantLocked(owner string, ck []abi.ResourceKey) *Guard {
	l.guardID++
	g := &Guard{l: l, id: l.guardID, owner: owner, keys: ck, since: l.clock.Now()}
	for _, k := range ck {
		st := l.state(k)
		st.holders = append(st.holders, g)
		if k.Mode == abi.Exclusive {
			st.excl = true
		}
	}
	return g
}

// dequeueLocked removes w from the queue of each of its keys. Must hold mu.
func (l *KeyLocker) dequeueLocked(w *waiter) {
	for _, k := range w.keys {
		id := keyID{k.Domain, k.Key}
		st := l.keys[id]
		if st == nil {
			continue
		}
		for i, q := range st.queue {
			if q.w == w {
				copy(st.queue[i:], st.queue[i+1:])
				st.queue[len(st.queue)-1] = queued{}
				st.queue = st.queue[:len(st.queue)-1]
				break
			}
		}
		if len(st.queue) == 0 && len(st.holders) == 0 {
			l.dropLocked(id, st)
		}
	}
	l.waiters--
}

// wakeLocked grants, in ticket order, every waiter on keys (and,
// transitively, on the keys of waiters granted meanwhile) that has become
// grantable. Must hold mu.
func (l *KeyLocker) wakeLocked(keys []abi.ResourceKey) {
	if l.waiters == 0 {
		return
	}
	work := make([]keyID, 0, len(keys))
	for _, k := range keys {
		work = append(work, keyID{k.Domain, k.Key})
	}
	for len(work) > 0 {
		id := work[len(work)-1]
		work = work[:len(work)-1]
		st := l.keys[id]
		for i := 0; st != nil && i < len(st.queue); {
			q := st.queue[i]
			if l.grantable(q.w.seq, q.w.keys) >= 0 {
				if q.mode == abi.Exclusive {
					break // every later waiter on this key conflicts with q
				}
				i++
				continue
			}
			w := q.w
			l.dequeueLocked(w)
			w.guard = l.grantLocked(w.owner, w.keys)
			close(w.ready)
			// Removing w from its queues may unblock later waiters there.
			for _, k := range w.keys {
				if kid := (keyID{k.Domain, k.Key}); kid != id {
					work = append(work, kid)
				}
			}
			st = l.keys[id] // i stays: the queue shifted left
		}
	}
}

// conflictLocked describes why k cannot be taken now. Must hold mu.
func (l *KeyLocker) conflictLocked(k abi.ResourceKey) *ConflictError {
	e := &ConflictError{Key: k}
	st := l.keys[keyID{k.Domain, k.Key}]
	if st == nil {
		return e
	}
	for _, h := range st.holders {
		if st.excl || k.Mode == abi.Exclusive {
			e.Holders = append(e.Holders, h.owner)
		}
	}
	for _, q := range st.queue {
		if conflicts(q.mode, k.Mode) {
			e.Waiters = append(e.Waiters, q.w.owner)
		}
	}
	sort.Strings(e.Holders)
	return e
}

// KeySnapshot is the state of one locked or awaited key.
type KeySnapshot struct {
	Domain  string       `json:"domain"`
	Key     string       `json:"key"`
	Mode    abi.LockMode `json:"mode"` // mode of the current holders
	Holders []HolderInfo `json:"holders"`
	Waiters []WaiterInfo `json:"waiters,omitempty"`
}

// HolderInfo describes one holder of a key.
type HolderInfo struct {
	Owner   string    `json:"owner"`
	GuardID uint64    `json:"guard_id"`
	Since   time.Time `json:"since"`
}

// WaiterInfo describes one queued request on a key, in queue order.
type WaiterInfo struct {
	Owner string       `json:"owner"`
	Mode  abi.LockMode `json:"mode"`
	Since time.Time    `json:"since"`
}

// Snapshot returns every key that is held or awaited, sorted by domain
// then key; holders are sorted by guard id, waiters in queue order.
func (l *KeyLocker) Snapshot() []KeySnapshot {
	l.mu.Lock()
	out := make([]KeySnapshot, 0, len(l.keys))
	for id, st := range l.keys {
		ks := KeySnapshot{Domain: id.domain, Key: id.key, Mode: abi.Shared}
		if st.excl {
			ks.Mode = abi.Exclusive
		}
		for _, h := range st.holders {
			ks.Holders = append(ks.Holders, HolderInfo{Owner: h.owner, GuardID: h.id, Since: h.since})
		}
		for _, q := range st.queue {
			ks.Waiters = append(ks.Waiters, WaiterInfo{Owner: q.w.owner, Mode: q.mode, Since: q.w.since})
		}
		sort.Slice(ks.Holders, func(i, j int) bool { return ks.Holders[i].GuardID < ks.Holders[j].GuardID })
		out = append(out, ks)
	}
	l.mu.Unlock()
	sort.Slice(out, func(i, j int) bool {
		if out[i].Domain != out[j].Domain {
			return out[i].Domain < out[j].Domain
		}
		return out[i].Key < out[j].Key
	})
	return out
}

// Holding is one (key, owner) pair of Holders.
type Holding struct {
	Key   abi.ResourceKey // Mode is the mode held
	Owner string
}

// Holders returns every current (key, owner) holding, sorted by key then
// owner. Waiters are not included (see Snapshot).
func (l *KeyLocker) Holders() []Holding {
	var out []Holding
	for _, ks := range l.Snapshot() {
		for _, h := range ks.Holders {
			out = append(out, Holding{Key: abi.ResourceKey{Domain: ks.Domain, Key: ks.Key, Mode: ks.Mode}, Owner: h.Owner})
		}
	}
	sort.SliceStable(out, func(i, j int) bool {
		a, b := out[i], out[j]
		if a.Key.Domain != b.Key.Domain {
			return a.Key.Domain < b.Key.Domain
		}
		if a.Key.Key != b.Key.Key {
			return a.Key.Key < b.Key.Key
		}
		return a.Owner < b.Owner
	})
	return out
}

// Stats reports counts for metrics and tests.
type Stats struct {
	Keys    int // keys with holders or waiters
	Waiters int // queued requests
}

// Stats returns the current counts.
func (l *KeyLocker) Stats() Stats {
	l.mu.Lock()
	defer l.mu.Unlock()
	return Stats{Keys: len(l.keys), Waiters: l.waiters}
}

type keyLockerMetrics struct {
	grants    metric.Int64Counter
	conflicts metric.Int64Counter
	cancels   metric.Int64Counter
	wait      metric.Float64Histogram
	attrs     metric.MeasurementOption
	waitAttrs metric.MeasurementOption
	immAttrs  metric.MeasurementOption
}

func newKeyLockerMetrics(mp metric.MeterProvider, name string, l *KeyLocker) keyLockerMetrics {
	if mp == nil {
		mp = noop.NewMeterProvider()
	}
	m := mp.Meter("github.com/hostd-dev/hostd/builtin/locks")
	var km keyLockerMetrics
	// Instrument creation errors only mean a misconfigured SDK; the
	// returned instruments are then no-ops, which is the right fallback.
	km.grants, _ = m.Int64Counter("hostd.keylock.grants", metric.WithDescription("resource-key lock grants"))
	km.conflicts, _ = m.Int64Counter("hostd.keylock.conflicts", metric.WithDescription("TryLock calls refused because of a conflict"))
	km.cancels, _ = m.Int64Counter("hostd.keylock.cancels", metric.WithDescription("waiters removed because their context ended"))
	km.wait, _ = m.Float64Histogram("hostd.keylock.wait", metric.WithUnit("s"), metric.WithDescription("time queued before a grant"))
	_, _ = m.Int64ObservableGauge("hostd.keylock.waiters", metric.WithDescription("queued resource-key lock requests"),
		metric.WithInt64Callback(func(_ context.Context, o metric.Int64Observer) error {
			o.Observe(int64(l.Stats().Waiters), metric.WithAttributes(attribute.String("locker", name)))
			return nil
		}))
	_, _ = m.Int64ObservableGauge("hostd.keylock.keys", metric.WithDescription("resource keys held or awaited"),
		metric.WithInt64Callback(func(_ context.Context, o metric.Int64Observer) error {
			o.Observe(int64(l.Stats().Keys), metric.WithAttributes(attribute.String("locker", name)))
			return nil
		}))
	km.attrs = metric.WithAttributes(attribute.String("locker", name))
	km.waitAttrs = metric.WithAttributes(attribute.String("locker", name), attribute.Bool("waited", true))
	km.immAttrs = metric.WithAttributes(attribute.String("locker", name), attribute.Bool("waited", false))
	return km
}

func (m *keyLockerMetrics) acquired(ctx context.Context, waited bool, d time.Duration) {
	if waited {
		m.grants.Add(ctx, 1, m.waitAttrs)
		m.wait.Record(ctx, d.Seconds(), m.attrs)
		return
	}
	m.grants.Add(ctx, 1, m.immAttrs)
}

func (m *keyLockerMetrics) conflict(ctx context.Context) { m.conflicts.Add(ctx, 1, m.attrs) }
func (m *keyLockerMetrics) canceled(ctx context.Context) { m.cancels.Add(ctx, 1, m.attrs) }

package locks

import (
	"container/heap"
	"math"
	"time"

	"github.com/hostd-dev/hostd/runtime/catalog"
	"github.com/hostd-dev/hostd/sdk/abi"
)

// This file is the deterministic core of the lease-lock service: the
// in-memory table of keys, grants, waiters and deadlines. It does no I/O,
// starts no goroutines and reads no clock: the shell (lease_service.go)
// passes "now" as a monotonic duration and performs the catalog writes the
// table's transitions call for. All methods require the shell's mutex.
//
// Grant life cycle:
//
//	pending  --persisted-->  live  --release/evict/expire-->  leaving  --record deleted-->  (removed)
//	   \--persist failed--> (removed)
//
// A grant holds its keys in every state until it is removed, so a key is
// only granted to someone else after the previous holder's record has been
// deleted from the catalog: the catalog never holds two conflicting
// grants, and a fenced write conditional on a grant record's version can
// no longer commit once a newer holder exists.

type grantState uint8

const (
	gPending grantState = iota // in memory, being persisted
	gLive                      // persisted, replied
	gLeaving                   // released, evicted or expired; record being deleted
)

type lgrant struct {
	id        string
	fence     uint64
	token     string
	owner     string
	meta      map[string]string
	keys      []abi.ResourceKey
	ttl       time.Duration
	idem      string
	principal string // who took it ("" for records from before principals)
	fp        string // request fingerprint ("" for old records: key alone matches)
	createdAt time.Time
	expiresAt time.Time     // wall clock, display and restart rule
	deadline  time.Duration // monotonic; valid when live
	state     grantState
	version   catalog.Version // version of the grant record
	done      chan struct{}   // closed when pending resolves
	gone      chan struct{}   // closed when removed from the table
	failed    error           // why a pending grant was dropped
	leaveWhy  string          // released, expired, evicted (when leaving)
	renewal   bool            // a renewal record (lk/e/) may exist: set before it is written
	heapIdx   int             // index in the expiry heap, -1 if absent
}

// expired reports whether a live grant's TTL has run out at now.
func (g *lgrant) expired(now time.Duration) bool {
	return g.state == gLive && g.deadline <= now
}

type leaseReq struct {
	owner string
	meta  map[string]string
	keys  []abi.ResourceKey
	ttl   time.Duration
	idem  string
	// principal took (or asks for) the grant; fp fingerprints the request.
	principal string
	fp        string
}

type lwaiter struct {
	ticket uint64
	req    *leaseReq
	since  time.Time
	ready  chan struct{} // closed when g or err is set
	g      *lgrant
	err    error
}

type lqueued struct {
	w    *lwaiter
	mode abi.LockMode
}

type lkey struct {
	holders []*lgrant
	excl    bool
	queue   []lqueued
}

// idemID scopes an idempotency key to the principal that used it: a
// retry by anyone else never finds the entry.
type idemID struct{ principal, key string }

type leaseTable struct {
	keys    map[keyID]*lkey
	grants  map[uint64]*lgrant // live and leaving grants, by fence
	idem    map[idemID]*lgrant // pending and live grants with an idempotency key
	ticket  uint64
	waiters int
	exp     expiryHeap
}

func newLeaseTable() *leaseTable {
	return &leaseTable{keys: map[keyID]*lkey{}, grants: map[uint64]*lgrant{}, idem: map[idemID]*lgrant{}}
}

func (t *leaseTable) key(k abi.ResourceKey) *lkey {
	id := keyID{k.Domain, k.Key}
	st := t.keys[id]
	if st == nil {
		st = &lkey{}
		t.keys[id] = st
	}
	return st
}

func (t *leaseTable) dropIfIdle(id keyID, st *lkey) {
	if len(st.holders) == 0 && len(st.queue) == 0 {
		delete(t.keys, id)
	}
}

// blocked returns the index of the first key of ck that a request with
// the given ticket cannot take now (-1: grantable) and the live holders of
// ck whose TTL has run out at now (they still hold until reaped).
func (t *leaseTable) blocked(ticket uint64, ck []abi.ResourceKey, now time.Duration) (int, []*lgrant) {
	first := -1
	var expired []*lgrant
	for i, k := range ck {
		st := t.keys[keyID{k.Domain, k.Key}]
		if st == nil {
			continue
		}
		for _, h := range st.holders {
			if h.expired(now) && !containsGrant(expired, h) {
				expired = append(expired, h)
			}
		}
		if first >= 0 {
			continue
		}
		if st.excl || (k.Mode == abi.Exclusive && len(st.holders) > 0) {
			first = i
			continue
		}
		for _, q := range st.queue {
			if q.w.ticket >= ticket {
				break
			}
			if conflicts(q.mode, k.Mode) {
				first = i
				break
			}
		}
	}
	return first, expired
}

func containsGrant(gs []*lgrant, g *lgrant) bool {
	for _, x := range gs {
		if x == g {
			return true
		}
	}
	return false
}

// grant records a new pending grant for req as holder of its keys.
func (t *leaseTable) grant(req *leaseReq, created time.Time) *lgrant {
	g := &lgrant{
		owner: req.owner, meta: req.meta, keys: req.keys, ttl: req.ttl, idem: req.idem,
		principal: req.principal, fp: req.fp, createdAt: created, state: gPending, heapIdx: -1,
		done: make(chan struct{}), gone: make(chan struct{}),
	}
	for _, k := range req.keys {
		st := t.key(k)
		st.holders = append(st.holders, g)
		if k.Mode == abi.Exclusive {
			st.excl = true
		}
	}
	if g.idem != "" && g.principal != "" {
		t.idem[idemID{g.principal, g.idem}] = g
	}
	return g
}

// activate makes a persisted pending grant live.
func (t *leaseTable) activate(g *lgrant) {
	g.state = gLive
	t.grants[g.fence] = g
	heap.Push(&t.exp, g)
}

// setDeadline moves a live grant's deadline (renewal).
func (t *leaseTable) setDeadline(g *lgrant, d time.Duration) {
	g.deadline = d
	if g.heapIdx >= 0 {
		heap.Fix(&t.exp, g.heapIdx)
	}
}

// leave marks a live grant as leaving (it keeps its keys until removed).
func (t *leaseTable) leave(g *lgrant) {
	g.state = gLeaving
	if g.heapIdx >= 0 {
		heap.Remove(&t.exp, g.heapIdx)
	}
}

// remove takes g out of the table and frees its keys; the caller then
// calls wake(g.keys).
func (t *leaseTable) remove(g *lgrant) {
	for _, k := range g.keys {
		id := keyID{k.Domain, k.Key}
		st := t.keys[id]
		if st == nil {
			continue
		}
		st.holders = removeHolder(st.holders, g)
		if len(st.holders) == 0 {
			st.excl = false
		}
		t.dropIfIdle(id, st)
	}
	if g.heapIdx >= 0 {
		heap.Remove(&t.exp, g.heapIdx)
	}
	if t.grants[g.fence] == g {
		delete(t.grants, g.fence)
	}
	if g.idem != "" && t.idem[idemID{g.principal, g.idem}] == g {
		delete(t.idem, idemID{g.principal, g.idem})
	}
	select {
	case <-g.gone:
	default:
		close(g.gone)
	}
}

// enqueue queues req behind every earlier waiter.
func (t *leaseTable) enqueue(req *leaseReq, since time.Time) *lwaiter {
	t.ticket++
	w := &lwaiter{ticket: t.ticket, req: req, since: since, ready: make(chan struct{})}
	for _, k := range req.keys {
		st := t.key(k)
		st.queue = append(st.queue, lqueued{w: w, mode: k.Mode})
	}
	t.waiters++
	return w
}

// dequeue removes w from every queue it is in.
func (t *leaseTable) dequeue(w *lwaiter) {
	for _, k := range w.req.keys {
		id := keyID{k.Domain, k.Key}
		st := t.keys[id]
		if st == nil {
			continue
		}
		for i, q := range st.queue {
			if q.w == w {
				copy(st.queue[i:], st.queue[i+1:])
				st.queue[len(st.queue)-1] = lqueued{}
				st.queue = st.queue[:len(st.queue)-1]
				break
			}
		}
		t.dropIfIdle(id, st)
	}
	t.waiters--
}

// wake grants, in ticket order, the waiters on keys (and transitively on
// the keys of waiters granted meanwhile) that can now be granted, and
// returns them with their pending grants set. Expired holders still block
// (the shell reaps them first).
func (t *leaseTable) wake(keys []abi.ResourceKey, now time.Duration, created time.Time) []*lwaiter {
	if t.waiters == 0 {
		return nil
	}
	var out []*lwaiter
	work := make([]keyID, 0, len(keys))
	for _, k := range keys {
		work = append(work, keyID{k.Domain, k.Key})
	}
	for len(work) > 0 {
		id := work[len(work)-1]
		work = work[:len(work)-1]
		st := t.keys[id]
		for i := 0; st != nil && i < len(st.queue); {
			q := st.queue[i]
			if idx, _ := t.blocked(q.w.ticket, q.w.req.keys, now); idx >= 0 {
				if q.mode == abi.Exclusive {
					break
				}
				i++
				continue
			}
			w := q.w
			t.dequeue(w)
			w.g = t.grant(w.req, created)
			out = append(out, w)
			for _, k := range w.req.keys {
				if kid := (keyID{k.Domain, k.Key}); kid != id {
					work = append(work, kid)
				}
			}
			st = t.keys[id]
		}
	}
	return out
}

// popExpired marks every live grant whose deadline is <= now as leaving
// and returns them.
func (t *leaseTable) popExpired(now time.Duration) []*lgrant {
	var out []*lgrant
	for len(t.exp) > 0 && t.exp[0].deadline <= now {
		g := t.exp[0]
		t.leave(g)
		out = append(out, g)
	}
	return out
}

// nextDeadline returns the earliest live deadline (MaxInt64 if none).
func (t *leaseTable) nextDeadline() time.Duration {
	if len(t.exp) == 0 {
		return math.MaxInt64
	}
	return t.exp[0].deadline
}

// expiryHeap orders live grants by deadline.
type expiryHeap []*lgrant

func (h expiryHeap) Len() int           { return len(h) }
func (h expiryHeap) Less(i, j int) bool { return h[i].deadline < h[j].deadline }
func (h expiryHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].heapIdx = i
	h[j].heapIdx = j
}
func (h *expiryHeap) Push(x any) {
	g := x.(*lgrant)
	g.heapIdx = len(*h)
	*h = append(*h, g)
}
func (h *expiryHeap) Pop() any {
	old := *h
	g := old[len(old)-1]
	old[len(old)-1] = nil
	g.heapIdx = -1
	*h = old[:len(old)-1]
	return g
}

package locks

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"sort"
	"strconv"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/hostd-dev/hostd/runtime/catalog"
	"github.com/hostd-dev/hostd/sdk/abi"
)

// ErrNotFound (not_found): ForceRelease or Inspect named a key nobody holds.
var ErrNotFound = errors.New("locks: not found")

// Monotonic is implemented by clocks with a monotonic reading separate
// from their wall time (test clocks that can step the wall clock). The
// service measures every TTL on it.
type Monotonic interface {
	Monotonic() time.Duration
}

// Service is the durable lease-lock service: the goroutine shell around
// the deterministic leaseTable. See doc.go for the model and the catalog
// layout in lease_record.go.
//
// Locking: mu guards the table, closed and recent. It is never held across
// catalog I/O; a grant being persisted (pending) or deleted (leaving)
// keeps holding its keys meanwhile, so the catalog and the table agree on
// who may hold what.
type Service struct {
	opts   Options
	store  catalog.Store
	base   time.Time
	tracer trace.Tracer
	m      *leaseMetrics

	mu     sync.Mutex
	t      *leaseTable
	closed bool
	recent recentSet
	armed  time.Duration // deadline the expiry loop sleeps until (MaxInt64: none)

	kick chan struct{}
	stop chan struct{}
	wg   sync.WaitGroup
}

// Open loads the grants persisted in opts.Store, applies the restart rule
// (an unexpired grant's TTL restarts now and its new expiry is persisted;
// an expired one is deleted) and starts the expiry loop.
func Open(ctx context.Context, opts Options) (*Service, error) {
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	opts.setDefaults()
	tp := opts.TracerProvider
	if tp == nil {
		tp = noop.NewTracerProvider()
	}
	s := &Service{
		opts: opts, store: opts.Store, base: opts.Clock.Now(),
		tracer: tp.Tracer("github.com/hostd-dev/hostd/builtin/locks"),
		t:      newLeaseTable(), recent: newRecentSet(8192),
		kick: make(chan struct{}, 1), stop: make(chan struct{}), armed: math.MaxInt64,
	}
	s.m = newLeaseMetrics(opts.MeterProvider, s)
	if err := s.recover(ctx); err != nil {
		return nil, err
	}
	s.wg.Add(1)
	go s.expiryLoop()
	return s, nil
}

// now is the monotonic reading all deadlines are measured on.
func (s *Service) now() time.Duration {
	if m, ok := s.opts.Clock.(Monotonic); ok {
		return m.Monotonic()
	}
	return s.opts.Clock.Now().Sub(s.base)
}

// Close fails queued acquires with ErrClosed and stops the expiry loop.
// Grants stay in the catalog (they are restored by the next Open).
func (s *Service) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	seen := map[*lwaiter]bool{}
	for _, st := range s.t.keys {
		for _, q := range st.queue {
			if !seen[q.w] {
				seen[q.w] = true
			}
		}
	}
	for w := range seen {
		s.t.dequeue(w)
		w.err = ErrClosed
		close(w.ready)
	}
	s.mu.Unlock()
	close(s.stop)
	s.wg.Wait()
	return nil
}

func (s *Service) kickExpiry() {
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

// ---- acquire ----

func (s *Service) validateAcquire(r AcquireRequest) (*leaseReq, error) {
	if err := validateOwnerMeta(r.Owner, r.Meta); err != nil {
		return nil, err
	}
	if len(r.Keys) > MaxLeaseKeys {
		return nil, &InvalidKeyError{Index: -1, Reason: fmt.Sprintf("more than %d keys", MaxLeaseKeys)}
	}
	ck, err := canonicalNonEmpty(r.Keys)
	if err != nil {
		return nil, err
	}
	ttl, err := CheckTTL("ttl", r.TTL, s.opts.DefaultTTL, s.opts.MaxTTL)
	if err != nil {
		return nil, err
	}
	if r.Wait < 0 {
		return nil, &FieldError{"wait", fmt.Errorf("%w: negative wait %s", ErrInvalid, r.Wait)}
	}
	if len(r.IdempotencyKey) > MaxIdempotencyLen {
		return nil, &FieldError{"idempotency_key", fmt.Errorf("%w: idempotency key longer than %d bytes", ErrInvalid, MaxIdempotencyLen)}
	}
	principal := r.Principal
	if principal == "" {
		principal = PrincipalInProcess
	}
	if len(principal) > MaxPrincipalLen {
		return nil, fmt.Errorf("%w: principal longer than %d bytes", ErrInvalid, MaxPrincipalLen)
	}
	req := &leaseReq{owner: r.Owner, meta: cloneMeta(r.Meta), keys: ck, ttl: ttl, idem: r.IdempotencyKey, principal: principal}
	if req.idem != "" {
		req.fp = fingerprint(req)
	}
	return req, nil
}

// Acquire takes a lease on r.Keys, all or nothing. With r.Wait == 0 it
// fails at once with a *LeaseConflictError (ErrLocked) when a key is held
// in a conflicting mode or wanted by an earlier waiter; otherwise it queues
// fairly for up to r.Wait (then ErrLocked) or until ctx ends (ErrCanceled).
// The grant is fsynced in the catalog before Acquire returns.
// Other errors: *InvalidKeyError, ErrInvalid, ErrTTLTooLong, ErrClosed, or
// a wrapped catalog error.
func (s *Service) Acquire(ctx context.Context, r AcquireRequest) (*Grant, error) {
	ctx, span := s.tracer.Start(ctx, "locks.acquire")
	start := s.opts.Clock.Now()
	g, err := s.acquire(ctx, r)
	if span.IsRecording() {
		// All attributes in one call at the end: one allocation per span.
		attrs := make([]attribute.KeyValue, 0, 6)
		attrs = append(attrs, attribute.String("locks.owner", r.Owner), attribute.Int("locks.keys", len(r.Keys)),
			attribute.Int64("locks.wait_ms", r.Wait.Milliseconds()))
		if g != nil {
			attrs = append(attrs, attribute.String("locks.grant_id", g.ID), attribute.Int64("locks.fence", int64(g.Fence)))
		}
		s.end(ctx, span, "acquire", start, err, attrs...)
	} else {
		s.end(ctx, span, "acquire", start, err)
	}
	return g, err
}

func (s *Service) acquire(ctx context.Context, r AcquireRequest) (*Grant, error) {
	req, err := s.validateAcquire(r)
	if err != nil {
		return nil, err
	}
	var timeout <-chan time.Time
	if r.Wait > 0 {
		timeout = s.opts.Clock.After(r.Wait)
	}
	for {
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			return nil, ErrClosed
		}
		now := s.now()
		if req.idem != "" {
			// Only the principal's own entries are looked at: another
			// principal's grant is never returned, whatever owner,
			// keys or idempotency key it repeats.
			if g := s.t.idem[idemID{req.principal, req.idem}]; g != nil {
				switch {
				case g.state == gPending:
					s.mu.Unlock()
					select {
					case <-g.done:
						continue
					case <-ctx.Done():
						return nil, fmt.Errorf("%w: waiting for the original request: %w", ErrCanceled, ctx.Err())
					}
				case g.state == gLive && !g.expired(now):
					if g.fp != "" && g.fp != req.fp {
						s.mu.Unlock()
						return nil, &IdempotencyConflictError{Key: req.idem, OriginalID: g.id}
					}
					out := s.grantOut(g, true)
					s.mu.Unlock()
					return out, nil
				}
				// Expired or leaving: a retry now is a new request.
			}
		}
		idx, soon := s.t.blocked(math.MaxUint64, req.keys, now)
		if idx < 0 {
			g := s.t.grant(req, s.opts.Clock.Now())
			s.mu.Unlock()
			return s.persist(ctx, g)
		}
		if len(soon) > 0 {
			// Expired holders: delete their records, then look again.
			for _, g := range soon {
				s.t.leave(g)
				g.leaveWhy = "expired"
			}
			s.mu.Unlock()
			s.reap(soon, "expired")
			continue
		}
		if leaving := s.leavingOn(req.keys); leaving != nil {
			// A holder is being released or reaped: its key frees as
			// soon as its record is deleted.
			s.mu.Unlock()
			select {
			case <-leaving.gone:
				continue
			case <-ctx.Done():
				return nil, fmt.Errorf("%w: %w", ErrCanceled, ctx.Err())
			}
		}
		if r.Wait == 0 {
			cerr := s.conflictLocked(req.keys[idx], math.MaxUint64)
			s.mu.Unlock()
			return nil, cerr
		}
		w := s.t.enqueue(req, s.opts.Clock.Now())
		s.mu.Unlock()
		select {
		case <-w.ready:
			if w.err != nil {
				return nil, w.err
			}
			return s.persist(ctx, w.g)
		case <-ctx.Done():
			return nil, s.abandon(w, func() error { return fmt.Errorf("%w: %w", ErrCanceled, ctx.Err()) })
		case <-timeout:
			return nil, s.abandon(w, nil)
		}
	}
}

// leavingOn returns a leaving holder of any of keys, or nil. Must hold mu.
func (s *Service) leavingOn(keys []abi.ResourceKey) *lgrant {
	for _, k := range keys {
		if st := s.t.keys[keyID{k.Domain, k.Key}]; st != nil {
			for _, h := range st.holders {
				if h.state == gLeaving {
					return h
				}
			}
		}
	}
	return nil
}

// abandon takes a waiter out of the queues after its wait ended. If it was
// granted meanwhile, the (unpersisted) grant is dropped. errFn builds the
// error; nil means "timed out": a *LeaseConflictError for the blocking key.
func (s *Service) abandon(w *lwaiter, errFn func() error) error {
	s.mu.Lock()
	var woken []*lwaiter
	select {
	case <-w.ready:
		if w.err != nil {
			s.mu.Unlock()
			return w.err
		}
		s.t.remove(w.g)
		w.g.failed = ErrCanceled
		close(w.g.done)
		woken = s.t.wake(w.g.keys, s.now(), s.opts.Clock.Now())
	default:
		s.t.dequeue(w)
		woken = s.t.wake(w.req.keys, s.now(), s.opts.Clock.Now())
	}
	var err error
	if errFn != nil {
		err = errFn()
	} else {
		idx, _ := s.t.blocked(math.MaxUint64, w.req.keys, s.now())
		if idx < 0 {
			idx = 0
		}
		err = s.conflictLocked(w.req.keys[idx], math.MaxUint64)
	}
	release(woken)
	s.mu.Unlock()
	return err
}

// release hands pending grants to woken waiters. Must hold mu.
func release(ws []*lwaiter) {
	for _, w := range ws {
		close(w.ready)
	}
}

// persist allocates the fence, writes the grant record and makes the
// grant live; on failure it drops the grant and wakes the next waiters.
func (s *Service) persist(ctx context.Context, g *lgrant) (*Grant, error) {
	// The commit must not be abandoned half-way by the caller's context:
	// a record committed after we gave up would resurrect at restart.
	cctx := context.WithoutCancel(ctx)
	fence, err := s.store.NextSequence(cctx, fenceSequence, 1)
	if err == nil {
		wall := s.opts.Clock.Now()
		s.mu.Lock()
		g.fence, g.id, g.token = fence, strconv.FormatUint(fence, 10), newToken()
		g.createdAt, g.expiresAt = wall, wall.Add(g.ttl)
		rec := encodeGrant(g)
		s.mu.Unlock()
		var ver catalog.Version
		ver, err = s.store.Commit(cctx, &catalog.Batch{Ops: []catalog.Op{{Key: grantKey(fence), Value: rec}}})
		if err == nil {
			s.mu.Lock()
			g.version = ver
			g.deadline = s.now() + g.ttl
			s.t.activate(g)
			close(g.done)
			out := s.grantOut(g, false)
			kick := g.deadline < s.armed
			s.mu.Unlock()
			if kick {
				s.kickExpiry()
			}
			return out, nil
		}
	}
	s.mu.Lock()
	s.t.remove(g)
	g.failed = err
	close(g.done)
	release(s.t.wake(g.keys, s.now(), s.opts.Clock.Now()))
	s.mu.Unlock()
	return nil, fmt.Errorf("locks: persist grant: %w", err)
}

func newToken() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails on supported platforms
	return hex.EncodeToString(b[:])
}

// grantOut copies g for the caller. Must hold mu.
func (s *Service) grantOut(g *lgrant, dup bool) *Grant {
	return &Grant{
		ID: g.id, Token: g.token, Owner: g.owner, Meta: cloneMeta(g.meta),
		Keys: slices.Clone(g.keys), Fence: g.fence, TTL: g.ttl,
		ExpiresAt: g.expiresAt, CreatedAt: g.createdAt, Duplicate: dup, Principal: g.principal,
	}
}

func grantView(g *lgrant) GrantView {
	return GrantView{
		ID: g.id, Owner: g.owner, Meta: cloneMeta(g.meta), Keys: slices.Clone(g.keys),
		Fence: g.fence, TTL: g.ttl, ExpiresAt: g.expiresAt, CreatedAt: g.createdAt, Principal: g.principal,
	}
}

// conflictLocked describes why k cannot be taken by a request with ticket.
func (s *Service) conflictLocked(k abi.ResourceKey, ticket uint64) *LeaseConflictError {
	e := &LeaseConflictError{Key: k}
	st := s.t.keys[keyID{k.Domain, k.Key}]
	if st == nil {
		return e
	}
	for _, h := range st.holders {
		if st.excl || k.Mode == abi.Exclusive {
			e.Holders = append(e.Holders, s.holderView(h, k))
		}
	}
	for _, q := range st.queue {
		if q.w.ticket < ticket && conflicts(q.mode, k.Mode) {
			e.Waiters++
		}
	}
	sort.Slice(e.Holders, func(i, j int) bool { return e.Holders[i].Fence < e.Holders[j].Fence })
	return e
}

func (s *Service) holderView(h *lgrant, k abi.ResourceKey) HolderView {
	mode := abi.Shared
	for _, hk := range h.keys {
		if hk.Domain == k.Domain && hk.Key == k.Key {
			mode = hk.Mode
		}
	}
	return HolderView{GrantID: h.id, Owner: h.owner, Meta: cloneMeta(h.meta), Mode: mode, Fence: h.fence, ExpiresAt: h.expiresAt}
}

// ---- release, expiry, eviction ----

// reap deletes the records of grants already marked leaving, then removes
// them from the table and wakes their waiters. On a catalog error the
// grants go back to live; the expiry loop retries.
func (s *Service) reap(gs []*lgrant, why string) error {
	b := &catalog.Batch{}
	for _, g := range gs {
		b.Ops = append(b.Ops, catalog.Op{Key: grantKey(g.fence), Delete: true})
		if g.renewal { // most grants are never renewed: no second delete
			b.Ops = append(b.Ops, catalog.Op{Key: renewalKey(g.fence), Delete: true})
		}
	}
	_, err := s.store.Commit(context.Background(), b)
	s.mu.Lock()
	defer s.mu.Unlock()
	if err != nil {
		for _, g := range gs {
			s.relive(g)
		}
		s.opts.Logger.Warn("locks: deleting grants failed; will retry", "reason", why, "grants", len(gs), "err", err)
		return err
	}
	var keys []abi.ResourceKey
	for _, g := range gs {
		s.t.remove(g)
		s.recent.add(g.fence, g.token, g.principal, why)
		keys = append(keys, g.keys...)
	}
	s.m.expired(why, len(gs))
	release(s.t.wake(keys, s.now(), s.opts.Clock.Now()))
	return nil
}

// relive returns a leaving grant to live after a failed delete. Must hold mu.
func (s *Service) relive(g *lgrant) {
	if g.state == gLeaving && g.heapIdx < 0 {
		g.state = gLive
		s.t.activate(g)
	}
}

func parseGrantID(id string) (uint64, bool) {
	n, err := strconv.ParseUint(id, 10, 64)
	return n, err == nil && n > 0
}

// lookup finds the live grant id with token. Must hold mu. With a
// principal (not ""), a grant another principal took is treated exactly
// like an unknown one. Errors: ErrNotHolder (unknown, wrong token or
// principal, released, evicted), or ErrExpired when expiredErr is set and
// the grant's TTL ran out.
func (s *Service) lookup(id, token, principal string, expiredErr bool) (*lgrant, error) {
	fence, ok := parseGrantID(id)
	if !ok {
		return nil, fmt.Errorf("%w: no grant %q", ErrNotHolder, id)
	}
	g := s.t.grants[fence]
	if g == nil || g.token != token || (principal != "" && g.principal != principal) {
		if r, ok := s.recent.get(fence); ok && r.token == token && (principal == "" || r.principal == principal) {
			if r.why == "expired" && expiredErr {
				return nil, fmt.Errorf("%w: grant %s expired", ErrExpired, id)
			}
			return nil, fmt.Errorf("%w: grant %s was %s", ErrNotHolder, id, r.why)
		}
		return nil, fmt.Errorf("%w: no grant %s with that token", ErrNotHolder, id)
	}
	if g.state == gLeaving || g.expired(s.now()) {
		if expiredErr && (g.state == gLive || g.leaveWhy == "expired") {
			return nil, fmt.Errorf("%w: grant %s expired", ErrExpired, id)
		}
		return g, fmt.Errorf("%w: grant %s is no longer held", ErrNotHolder, id)
	}
	return g, nil
}

// Release ends a grant. A wrong token or a grant that expired (or was
// evicted) gives ErrNotHolder and changes nothing; a second release by the
// holder (same token) is a no-op. The deletion is durable before Release
// returns, and only then are the keys handed on.
func (s *Service) Release(ctx context.Context, id, token string) error {
	return s.releaseOp(ctx, id, token, "")
}

// ReleaseAs is Release for a caller that may act only on its own grants
// (plugins): a grant principal did not take is ErrNotHolder, exactly like
// an unknown one, even with the right token. An empty principal is
// ErrInvalid.
func (s *Service) ReleaseAs(ctx context.Context, principal, id, token string) error {
	if principal == "" {
		return fmt.Errorf("%w: no principal", ErrInvalid)
	}
	return s.releaseOp(ctx, id, token, principal)
}

func (s *Service) releaseOp(ctx context.Context, id, token, principal string) error {
	ctx, span := s.tracer.Start(ctx, "locks.release")
	start := s.opts.Clock.Now()
	err := s.release(ctx, id, token, principal)
	s.end(ctx, span, "release", start, err, attribute.String("locks.grant_id", id))
	return err
}

func (s *Service) release(ctx context.Context, id, token, principal string) error {
	s.mu.Lock()
	fence, _ := parseGrantID(id)
	if r, ok := s.recent.get(fence); ok && r.token == token && r.why == "released" && s.t.grants[fence] == nil &&
		(principal == "" || r.principal == principal) {
		s.mu.Unlock()
		return nil // second release by the holder
	}
	g, err := s.lookup(id, token, principal, false)
	if err != nil {
		if g != nil && g.state == gLeaving && g.leaveWhy == "released" {
			s.mu.Unlock()
			<-g.gone // a concurrent release by the holder is finishing
			return nil
		}
		s.mu.Unlock()
		return err
	}
	s.t.leave(g)
	g.leaveWhy = "released"
	s.mu.Unlock()
	return s.reap([]*lgrant{g}, "released")
}

// Renew extends a live grant to ttl from now (0: its current TTL). A grant
// whose TTL already ran out fails with ErrExpired (it is never silently
// re-acquired); a wrong token with ErrNotHolder. The new expiry is durable
// before Renew returns.
func (s *Service) Renew(ctx context.Context, id, token string, ttl time.Duration) (*Grant, error) {
	return s.renewOp(ctx, id, token, "", ttl)
}

// RenewAs is Renew for a caller that may act only on its own grants
// (plugins): a grant principal did not take is ErrNotHolder, exactly like
// an unknown one, even with the right token. An empty principal is
// ErrInvalid.
func (s *Service) RenewAs(ctx context.Context, principal, id, token string, ttl time.Duration) (*Grant, error) {
	if principal == "" {
		return nil, fmt.Errorf("%w: no principal", ErrInvalid)
	}
	return s.renewOp(ctx, id, token, principal, ttl)
}

func (s *Service) renewOp(ctx context.Context, id, token, principal string, ttl time.Duration) (*Grant, error) {
	ctx, span := s.tracer.Start(ctx, "locks.renew")
	start := s.opts.Clock.Now()
	g, err := s.renew(ctx, id, token, principal, ttl)
	s.end(ctx, span, "renew", start, err, attribute.String("locks.grant_id", id))
	return g, err
}

func (s *Service) renew(ctx context.Context, id, token, principal string, ttl time.Duration) (*Grant, error) {
	// 0 = the grant's current TTL (checked against the rule after the
	// lookup, below).
	if _, err := CheckTTL("ttl", ttl, MinTTL, s.opts.MaxTTL); err != nil {
		return nil, err
	}
	s.mu.Lock()
	g, err := s.lookup(id, token, principal, true)
	if err != nil {
		s.mu.Unlock()
		return nil, err
	}
	if ttl == 0 {
		ttl = g.ttl
	}
	// Extend in memory first, so the expiry loop cannot reap the grant
	// while the renewal is being written.
	g.ttl = ttl
	g.expiresAt = s.opts.Clock.Now().Add(ttl)
	s.t.setDeadline(g, s.now()+ttl)
	g.renewal = true // before the write, so a concurrent reap deletes it too
	rec := encodeRenewal(ttl, g.expiresAt)
	out := s.grantOut(g, false)
	out.Token = ""
	kick := g.deadline < s.armed
	s.mu.Unlock()
	if kick {
		s.kickExpiry()
	}
	if _, err := s.store.Commit(context.WithoutCancel(ctx), &catalog.Batch{Ops: []catalog.Op{{Key: renewalKey(g.fence), Value: rec}}}); err != nil {
		return nil, fmt.Errorf("locks: persist renewal of %s: %w", id, err)
	}
	return out, nil
}

// CheckFence passes (nil) only if fence is the fence of a current,
// unexpired holder of key (the key's mode is ignored). Otherwise it returns
// an error wrapping ErrNotHolder. A check followed by a separate write is
// not fencing: use FenceCheck to make a catalog write conditional.
func (s *Service) CheckFence(key abi.ResourceKey, fence uint64) error {
	_, err := s.FenceCheck(key, fence)
	return err
}

// readOp records a read-only operation without context (no span: the
// caller's span, e.g. the API request's, covers it).
func (s *Service) readOp(op string, start time.Time, err error) {
	s.m.op(context.Background(), op, ErrorCode(err), s.opts.Clock.Now().Sub(start))
}

// FenceCheck is CheckFence for fenced catalog writes: it returns a
// catalog.Check to add to the write's Batch. The check holds exactly while
// the grant's record is unchanged, and the record is deleted before a key
// is handed to anyone else (and on release, expiry and ForceRelease), so
// the catalog rejects the batch (ErrConflict) if the fence went stale
// between FenceCheck and the commit:
//
//	chk, err := svc.FenceCheck(key, fence)
//	if err != nil { return err } // stale already
//	b := &catalog.Batch{Checks: []catalog.Check{chk}, Ops: ops}
//	_, err = store.Commit(ctx, b) // ErrConflict: fence went stale meanwhile
func (s *Service) FenceCheck(key abi.ResourceKey, fence uint64) (_ catalog.Check, err error) {
	return s.fenceCheck("", key, fence)
}

// FenceCheckAs is FenceCheck for a caller that may use only its own
// grants (plugins; fenced writes through the API): a fence of a grant
// principal did not take fails like a stale one (ErrNotHolder). An empty
// principal is ErrInvalid.
func (s *Service) FenceCheckAs(principal string, key abi.ResourceKey, fence uint64) (catalog.Check, error) {
	if principal == "" {
		return catalog.Check{}, fmt.Errorf("%w: no principal", ErrInvalid)
	}
	return s.fenceCheck(principal, key, fence)
}

// CheckFenceAs is CheckFence restricted to principal's own grants (see
// FenceCheckAs).
func (s *Service) CheckFenceAs(principal string, key abi.ResourceKey, fence uint64) error {
	_, err := s.FenceCheckAs(principal, key, fence)
	return err
}

func (s *Service) fenceCheck(principal string, key abi.ResourceKey, fence uint64) (_ catalog.Check, err error) {
	defer func(start time.Time) { s.readOp("check_fence", start, err) }(s.opts.Clock.Now())
	s.mu.Lock()
	defer s.mu.Unlock()
	if st := s.t.keys[keyID{key.Domain, key.Key}]; st != nil {
		now := s.now()
		for _, h := range st.holders {
			if h.fence == fence && h.state == gLive && !h.expired(now) && (principal == "" || h.principal == principal) {
				return catalog.Check{Key: grantKey(fence), Version: h.version}, nil
			}
		}
	}
	return catalog.Check{}, fmt.Errorf("%w: fence %d is not held on %q:%q", ErrNotHolder, fence, key.Domain, key.Key)
}

// ForceRelease evicts the grants holding key (only grantID if not empty):
// their records are deleted, a new fence is drawn from the global sequence
// (above every evicted fence: hand it to the protected resource so it
// rejects the evicted holders) and an audit record per evicted grant is
// written, all in one durable commit. ErrNotFound if nothing matched;
// ErrInvalid without a reason.
func (s *Service) ForceRelease(ctx context.Context, key abi.ResourceKey, grantID, reason, actor string) (*ForceReleaseResult, error) {
	ctx, span := s.tracer.Start(ctx, "locks.force_release", trace.WithAttributes(
		attribute.String("locks.key", key.Domain+":"+key.Key), attribute.String("locks.grant_id", grantID)))
	start := s.opts.Clock.Now()
	res, err := s.forceRelease(ctx, key, grantID, reason, actor)
	s.end(ctx, span, "force_release", start, err)
	return res, err
}

func (s *Service) forceRelease(ctx context.Context, key abi.ResourceKey, grantID, reason, actor string) (*ForceReleaseResult, error) {
	if reason == "" {
		return nil, fmt.Errorf("%w: a reason is required", ErrInvalid)
	}
	if len(reason) > MaxMetaBytes || len(actor) > MaxOwnerLen {
		return nil, fmt.Errorf("%w: reason or actor too long", ErrInvalid)
	}
	if err := validateKey(0, abi.ResourceKey{Domain: key.Domain, Key: key.Key}); err != nil {
		return nil, err
	}
	s.mu.Lock()
	var victims []*lgrant
	if st := s.t.keys[keyID{key.Domain, key.Key}]; st != nil {
		for _, h := range st.holders {
			if h.state == gLive && (grantID == "" || h.id == grantID) {
				victims = append(victims, h)
			}
		}
	}
	if len(victims) == 0 {
		s.mu.Unlock()
		if grantID != "" {
			return nil, fmt.Errorf("%w: grant %s does not hold %q:%q", ErrNotFound, grantID, key.Domain, key.Key)
		}
		return nil, fmt.Errorf("%w: nobody holds %q:%q", ErrNotFound, key.Domain, key.Key)
	}
	sort.Slice(victims, func(i, j int) bool { return victims[i].fence < victims[j].fence })
	for _, g := range victims {
		s.t.leave(g)
		g.leaveWhy = "evicted"
	}
	s.mu.Unlock()

	cctx := context.WithoutCancel(ctx)
	fail := func(err error) (*ForceReleaseResult, error) {
		s.mu.Lock()
		for _, g := range victims {
			s.relive(g)
		}
		s.mu.Unlock()
		return nil, fmt.Errorf("locks: force release: %w", err)
	}
	bump, err := s.store.NextSequence(cctx, fenceSequence, 1)
	if err != nil {
		return fail(err)
	}
	firstAudit, err := s.store.NextSequence(cctx, auditSequence, uint64(len(victims)))
	if err != nil {
		return fail(err)
	}
	res := &ForceReleaseResult{Fence: bump}
	b := &catalog.Batch{}
	at := s.opts.Clock.Now()
	for i, g := range victims {
		a := AuditRecord{
			ID: firstAudit + uint64(i), At: at, Action: "force_release",
			Key:     AuditKey{Domain: key.Domain, Key: key.Key, Mode: s.holderView(g, key).Mode.String()},
			GrantID: g.id, Owner: g.owner, Meta: cloneMeta(g.meta), OldFence: g.fence, NewFence: bump,
			Reason: reason, Actor: actor,
		}
		raw, _ := json.Marshal(a)
		b.Ops = append(b.Ops,
			catalog.Op{Key: grantKey(g.fence), Delete: true},
			catalog.Op{Key: renewalKey(g.fence), Delete: true},
			catalog.Op{Key: auditKey(a.ID), Value: raw})
		res.Evicted = append(res.Evicted, grantView(g))
		res.Audit = append(res.Audit, a)
	}
	if _, err := s.store.Commit(cctx, b); err != nil {
		return fail(err)
	}
	s.mu.Lock()
	var keys []abi.ResourceKey
	for _, g := range victims {
		s.t.remove(g)
		s.recent.add(g.fence, g.token, g.principal, "evicted")
		keys = append(keys, g.keys...)
	}
	release(s.t.wake(keys, s.now(), s.opts.Clock.Now()))
	s.mu.Unlock()
	s.opts.Logger.Warn("locks: force release", "key", key.Domain+":"+key.Key, "evicted", len(victims), "reason", reason, "actor", actor, "new_fence", bump)
	return res, nil
}

// Audit returns audit records with id > after, oldest first, at most limit.
func (s *Service) Audit(ctx context.Context, after uint64, limit int) (_ []AuditRecord, err error) {
	ctx, span := s.tracer.Start(ctx, "locks.audit")
	defer func(start time.Time) { s.end(ctx, span, "audit", start, err) }(s.opts.Clock.Now())
	if limit <= 0 {
		limit = 100
	}
	var out []AuditRecord
	err = s.store.View(ctx, func(r catalog.Reader) error {
		return r.Scan(auditKey(after+1), []byte(auditPrefix+"~"), func(kv catalog.KV) error {
			var a AuditRecord
			if err := json.Unmarshal(kv.Value, &a); err != nil {
				return fmt.Errorf("locks: audit record %s: %w", kv.Key, err)
			}
			out = append(out, a)
			if len(out) >= limit {
				return catalog.ErrStop
			}
			return nil
		})
	})
	return out, err
}

// List returns live grants with id (fence) > after, by fence, at most
// limit (default 100). Tokens are never included.
func (s *Service) List(after uint64, limit int) []GrantView {
	defer func(start time.Time) { s.readOp("list", start, nil) }(s.opts.Clock.Now())
	if limit <= 0 {
		limit = 100
	}
	s.mu.Lock()
	now := s.now()
	fences := make([]uint64, 0, len(s.t.grants))
	for f, g := range s.t.grants {
		if f > after && g.state == gLive && !g.expired(now) {
			fences = append(fences, f)
		}
	}
	slices.Sort(fences)
	if len(fences) > limit {
		fences = fences[:limit]
	}
	out := make([]GrantView, len(fences))
	for i, f := range fences {
		out[i] = grantView(s.t.grants[f])
	}
	s.mu.Unlock()
	return out
}

// Get returns one live grant (no token) or ErrNotFound.
func (s *Service) Get(id string) (_ GrantView, err error) {
	defer func(start time.Time) { s.readOp("get", start, err) }(s.opts.Clock.Now())
	fence, ok := parseGrantID(id)
	s.mu.Lock()
	defer s.mu.Unlock()
	if g := s.t.grants[fence]; ok && g != nil && g.state == gLive && !g.expired(s.now()) {
		return grantView(g), nil
	}
	return GrantView{}, fmt.Errorf("%w: no live grant %q", ErrNotFound, id)
}

// Inspect returns the holders (mode, fence, expiry, owner, meta) and the
// waiters of key, never tokens. A free key has no holders and no waiters.
func (s *Service) Inspect(key abi.ResourceKey) (_ KeyView, err error) {
	defer func(start time.Time) { s.readOp("inspect", start, err) }(s.opts.Clock.Now())
	if err := validateKey(0, abi.ResourceKey{Domain: key.Domain, Key: key.Key}); err != nil {
		return KeyView{}, err
	}
	kv := KeyView{Key: abi.ResourceKey{Domain: key.Domain, Key: key.Key}, Holders: []HolderView{}, Waiters: []WaiterView{}}
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.t.keys[keyID{key.Domain, key.Key}]
	if st == nil {
		return kv, nil
	}
	now := s.now()
	for _, h := range st.holders {
		if h.state == gLive && !h.expired(now) {
			kv.Holders = append(kv.Holders, s.holderView(h, key))
		}
	}
	if st.excl {
		kv.Key.Mode = abi.Exclusive
	}
	sort.Slice(kv.Holders, func(i, j int) bool { return kv.Holders[i].Fence < kv.Holders[j].Fence })
	for _, q := range st.queue {
		kv.Waiters = append(kv.Waiters, WaiterView{Owner: q.w.req.owner, Meta: cloneMeta(q.w.req.meta), Mode: q.mode, Since: q.w.since})
	}
	return kv, nil
}

// LeaseStats are counts for metrics and tests.
type LeaseStats struct {
	Grants  int // grants in the table (any state)
	Keys    int // keys with holders or waiters
	Waiters int
}

// Stats returns the current counts.
func (s *Service) Stats() LeaseStats {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for range s.t.grants {
		n++
	}
	return LeaseStats{Grants: n, Keys: len(s.t.keys), Waiters: s.t.waiters}
}

// ---- expiry loop ----

func (s *Service) expiryLoop() {
	defer s.wg.Done()
	for {
		s.mu.Lock()
		next, now := s.t.nextDeadline(), s.now()
		s.armed = next
		s.mu.Unlock()
		var timer <-chan time.Time
		if next != math.MaxInt64 {
			timer = s.opts.Clock.After(max(next-now, 0))
		}
		select {
		case <-s.stop:
			return
		case <-s.kick:
			continue
		case <-timer:
		}
		s.expireDue()
	}
}

// expireDue reaps every grant whose TTL has run out. On a catalog error it
// backs off briefly so a failing disk is not hammered.
func (s *Service) expireDue() {
	s.mu.Lock()
	gs := s.t.popExpired(s.now())
	for _, g := range gs {
		g.leaveWhy = "expired"
	}
	s.mu.Unlock()
	for len(gs) > 0 {
		n := min(len(gs), reapChunk)
		if err := s.reap(gs[:n], "expired"); err != nil {
			select {
			case <-s.stop:
			case <-s.opts.Clock.After(100 * time.Millisecond):
			}
			for _, g := range gs[n:] {
				s.mu.Lock()
				s.relive(g)
				s.mu.Unlock()
			}
			return
		}
		gs = gs[n:]
	}
}

// reapChunk bounds the grants deleted per commit (1 or 2 ops each).
const reapChunk = 2000

// ---- recovery ----

// recover loads persisted grants (see Open).
func (s *Service) recover(ctx context.Context) error {
	type loaded struct {
		rec  *grantRecord
		keys []abi.ResourceKey
		ver  catalog.Version
	}
	var grants []loaded
	renewals := map[uint64]*renewalRecord{}
	var bad [][]byte
	err := s.store.View(ctx, func(r catalog.Reader) error {
		if err := r.Scan([]byte(grantPrefix), []byte(grantPrefix+"~"), func(kv catalog.KV) error {
			rec, keys, err := decodeGrant(kv.Key, kv.Value)
			if err != nil {
				s.opts.Logger.Error("locks: dropping unreadable grant record", "key", string(kv.Key), "err", err)
				bad = append(bad, kv.Key)
				return nil
			}
			grants = append(grants, loaded{rec, keys, kv.Version})
			return nil
		}); err != nil {
			return err
		}
		return r.Scan([]byte(renewalPrefix), []byte(renewalPrefix+"~"), func(kv catalog.KV) error {
			f, rec, err := decodeRenewal(kv.Key, kv.Value)
			if err != nil {
				bad = append(bad, kv.Key)
				return nil
			}
			renewals[f] = rec
			return nil
		})
	})
	if err != nil {
		return fmt.Errorf("locks: load grants: %w", err)
	}
	wall, now := s.opts.Clock.Now(), s.now()
	var ops []catalog.Op
	for _, k := range bad {
		ops = append(ops, catalog.Op{Key: k, Delete: true})
	}
	// Highest fence first: if two persisted grants conflict (impossible
	// unless the catalog was edited), the later one wins, because it can
	// only have been granted after the earlier one was gone.
	sort.Slice(grants, func(i, j int) bool { return grants[i].rec.Fence > grants[j].rec.Fence })
	for _, l := range grants {
		r := l.rec
		ttl, exp := time.Duration(r.TTLms)*time.Millisecond, r.ExpiresAt
		if rn := renewals[r.Fence]; rn != nil {
			if rn.ExpiresAt.After(exp) {
				exp = rn.ExpiresAt
			}
			ttl = time.Duration(rn.TTLms) * time.Millisecond
			delete(renewals, r.Fence)
		}
		drop := !exp.After(wall) && !s.opts.Takeover
		if !drop {
			if idx, _ := s.t.blocked(math.MaxUint64, l.keys, now); idx >= 0 {
				s.opts.Logger.Error("locks: dropping grant that conflicts with a later one", "grant", r.Fence, "key", formatKey(l.keys[idx]))
				drop = true
			}
		}
		if drop {
			ops = append(ops, catalog.Op{Key: grantKey(r.Fence), Delete: true}, catalog.Op{Key: renewalKey(r.Fence), Delete: true})
			continue
		}
		// A record without a principal (written before principals were
		// recorded) keeps its grant, but its idempotency key matches no
		// retry: nobody can prove to be the principal that took it.
		g := s.t.grant(&leaseReq{owner: r.Owner, meta: r.Meta, keys: l.keys, ttl: ttl, idem: r.Idem,
			principal: r.Principal, fp: r.FP}, r.CreatedAt)
		g.fence, g.id, g.token, g.version = r.Fence, strconv.FormatUint(r.Fence, 10), r.Token, l.ver
		// Restart rule: the remaining TTL restarts now, and the new
		// expiry is persisted so a second restart cannot shorten it.
		g.expiresAt = wall.Add(ttl)
		g.deadline = now + ttl
		g.renewal = true // written below
		close(g.done)
		s.t.activate(g)
		ops = append(ops, catalog.Op{Key: renewalKey(r.Fence), Value: encodeRenewal(ttl, g.expiresAt)})
	}
	for f := range renewals { // renewals of grants that are gone
		ops = append(ops, catalog.Op{Key: renewalKey(f), Delete: true})
	}
	for len(ops) > 0 {
		n := min(len(ops), 2*reapChunk)
		if _, err := s.store.Commit(ctx, &catalog.Batch{Ops: ops[:n]}); err != nil {
			return fmt.Errorf("locks: persist recovered grants: %w", err)
		}
		ops = ops[n:]
	}
	return nil
}

// ---- recently ended grants ----

type recentEntry struct {
	token     string
	principal string
	why       string // released, expired, evicted
}

// recentSet remembers the last N ended grants so that a late renew gets
// "expired" and a repeated release is a no-op. Bounded FIFO.
type recentSet struct {
	m     map[uint64]recentEntry
	order []uint64
	next  int
}

func newRecentSet(n int) recentSet {
	return recentSet{m: make(map[uint64]recentEntry, n), order: make([]uint64, n)}
}

func (r *recentSet) add(fence uint64, token, principal, why string) {
	if old := r.order[r.next]; old != 0 {
		delete(r.m, old)
	}
	r.order[r.next] = fence
	r.next = (r.next + 1) % len(r.order)
	r.m[fence] = recentEntry{token: token, principal: principal, why: why}
}

func (r *recentSet) get(fence uint64) (recentEntry, bool) {
	e, ok := r.m[fence]
	return e, ok
}

// end finishes an operation's span (adding attrs and the result code)
// and records its metrics. A span that is not recording gets no
// attributes, so an unsampled operation builds none.
func (s *Service) end(ctx context.Context, span trace.Span, op string, start time.Time, err error, attrs ...attribute.KeyValue) {
	code := ErrorCode(err)
	if span.IsRecording() {
		if err != nil {
			span.RecordError(err)
			span.SetStatus(codes.Error, err.Error())
		}
		span.SetAttributes(append(attrs, attribute.String("locks.result", code))...)
	}
	span.End()
	s.m.op(ctx, op, code, s.opts.Clock.Now().Sub(start))
}

// ErrorCode maps an error of this package to its stable API code:
// locked, not_holder, expired, ttl_too_long, invalid_key, canceled,
// invalid_argument, conflict (idempotency key reused), not_found,
// unavailable (closed), or internal.
func ErrorCode(err error) string {
	switch {
	case err == nil:
		return "ok"
	case errors.Is(err, ErrLocked):
		return "locked"
	case errors.Is(err, ErrNotHolder):
		return "not_holder"
	case errors.Is(err, ErrExpired):
		return "expired"
	case errors.Is(err, ErrTTLTooLong):
		return "ttl_too_long"
	case errors.Is(err, ErrInvalidKey):
		return "invalid_key"
	case errors.Is(err, ErrCanceled), errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return "canceled"
	case errors.Is(err, ErrInvalid):
		return "invalid_argument"
	case errors.Is(err, ErrIdempotencyConflict):
		return "conflict"
	case errors.Is(err, ErrNotFound):
		return "not_found"
	case errors.Is(err, ErrClosed), errors.Is(err, catalog.ErrClosed):
		return "unavailable"
	}
	return "internal"
}

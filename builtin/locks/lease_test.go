package locks

import (
	"context"
	"errors"
	"fmt"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hostd-dev/hostd/runtime/catalog"
	"github.com/hostd-dev/hostd/sdk/abi"
)

type leaseEnv struct {
	t     *testing.T
	dir   string
	sync  bool
	clock *fakeClock
	store catalog.Store
	svc   *Service
	// takeover opens the service as a new cluster leader would
	// (Options.Takeover).
	takeover bool
}

// openStore opens the catalog of dir: Badger in dir, or, while
// TestOnEtcd runs, an etcd catalog under a prefix of its own per dir (so
// that a restart reopens the same records).
func openStore(t *testing.T, dir string, sync bool) catalog.Store {
	t.Helper()
	if onEtcd != nil {
		return onEtcd.MustOpen(t, dir)
	}
	o := catalog.DefaultOptions(dir)
	o.SyncWrites = sync
	o.GCInterval = 0
	db, err := catalog.Open(o)
	if err != nil {
		t.Fatal(err)
	}
	return db
}

// newLeaseEnv opens a real Badger catalog in a temp dir and a service on a
// fake clock. sync=false skips fsync for tests that only check logic.
func newLeaseEnv(t *testing.T, sync bool) *leaseEnv {
	e := &leaseEnv{t: t, dir: t.TempDir(), sync: sync, clock: newFakeClock()}
	e.store = openStore(t, e.dir, sync)
	e.open()
	t.Cleanup(e.close)
	return e
}

func (e *leaseEnv) open() {
	e.t.Helper()
	svc, err := Open(context.Background(), Options{Store: e.store, Clock: e.clock, DefaultTTL: 10 * time.Second, MaxTTL: time.Minute,
		Takeover: e.takeover})
	if err != nil {
		e.t.Fatal(err)
	}
	e.svc = svc
}

func (e *leaseEnv) close() {
	if e.svc != nil {
		_ = e.svc.Close()
		e.svc = nil
	}
	if e.store != nil {
		_ = e.store.Close()
		e.store = nil
	}
}

// restart closes service and catalog and opens both again (same clock).
func (e *leaseEnv) restart() {
	e.close()
	e.store = openStore(e.t, e.dir, e.sync)
	e.open()
}

func (e *leaseEnv) acquire(owner string, ttl time.Duration, keys ...abi.ResourceKey) *Grant {
	e.t.Helper()
	g, err := e.svc.Acquire(context.Background(), AcquireRequest{Owner: owner, TTL: ttl, Keys: keys})
	if err != nil {
		e.t.Fatalf("acquire %v by %s: %v", keys, owner, err)
	}
	return g
}

func wantCode(t *testing.T, err error, code string) {
	t.Helper()
	if got := ErrorCode(err); got != code {
		t.Fatalf("error %v has code %q, want %q", err, got, code)
	}
}

// Scenario 1: A holds (f1), pauses past TTL; B acquires (f2 > f1); A's
// release is not_holder and B keeps the lock; CheckFence(f1) fails,
// CheckFence(f2) passes.
func TestLeaseScenario1ExpiryAndFencing(t *testing.T) {
	e := newLeaseEnv(t, true)
	k := ex("res", "x")
	a := e.acquire("A", 2*time.Second, k)
	if err := e.svc.CheckFence(k, a.Fence); err != nil {
		t.Fatal(err)
	}
	e.clock.Advance(3 * time.Second)
	b := e.acquire("B", 10*time.Second, k)
	if b.Fence <= a.Fence {
		t.Fatalf("fence did not increase: %d then %d", a.Fence, b.Fence)
	}
	wantCode(t, e.svc.Release(context.Background(), a.ID, a.Token), "not_holder")
	kv, _ := e.svc.Inspect(k)
	if len(kv.Holders) != 1 || kv.Holders[0].GrantID != b.ID {
		t.Fatalf("B lost the lock: %+v", kv)
	}
	wantCode(t, e.svc.CheckFence(k, a.Fence), "not_holder")
	if err := e.svc.CheckFence(k, b.Fence); err != nil {
		t.Fatal(err)
	}
}

// Scenario 2: renew after expiry fails; renew with a wrong token fails.
func TestLeaseScenario2Renew(t *testing.T) {
	e := newLeaseEnv(t, true)
	k := ex("res", "r")
	g := e.acquire("A", 2*time.Second, k)
	_, err := e.svc.Renew(context.Background(), g.ID, "wrong", 0)
	wantCode(t, err, "not_holder")
	e.clock.Advance(time.Second)
	r, err := e.svc.Renew(context.Background(), g.ID, g.Token, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if r.Token != "" || r.TTL != 5*time.Second {
		t.Fatalf("renewal result %+v", r)
	}
	e.clock.Advance(4 * time.Second) // 4 < 5: still held
	if err := e.svc.CheckFence(k, g.Fence); err != nil {
		t.Fatalf("renewed grant lost: %v", err)
	}
	_, err = e.svc.Renew(context.Background(), g.ID, g.Token, 2*time.Minute)
	wantCode(t, err, "ttl_too_long")
	e.clock.Advance(2 * time.Second) // past the renewed deadline
	_, err = e.svc.Renew(context.Background(), g.ID, g.Token, 0)
	wantCode(t, err, "expired")
	// Also once the expiry loop has reaped it.
	waitFor(t, func() bool { return e.svc.Stats().Grants == 0 })
	_, err = e.svc.Renew(context.Background(), g.ID, g.Token, 0)
	wantCode(t, err, "expired")
	// Never silently re-acquired.
	if kv, _ := e.svc.Inspect(k); len(kv.Holders) != 0 {
		t.Fatalf("holders after failed renew: %+v", kv)
	}
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not reached")
		}
		time.Sleep(time.Millisecond)
	}
}

// Scenario 3: multi-key {a,b,c} with c held by X: nothing acquired, X's
// TTL unchanged, error names c and X (with meta).
func TestLeaseScenario3MultiKeyAllOrNothing(t *testing.T) {
	e := newLeaseEnv(t, true)
	x, err := e.svc.Acquire(context.Background(), AcquireRequest{Owner: "X", Meta: map[string]string{"host": "h1"}, TTL: 20 * time.Second, Keys: []abi.ResourceKey{ex("k", "c")}})
	if err != nil {
		t.Fatal(err)
	}
	before, _ := e.svc.Get(x.ID)
	e.clock.Advance(time.Second)
	_, err = e.svc.Acquire(context.Background(), AcquireRequest{Owner: "Y", Keys: []abi.ResourceKey{ex("k", "a"), ex("k", "b"), ex("k", "c")}})
	var ce *LeaseConflictError
	if !errors.As(err, &ce) || ErrorCode(err) != "locked" {
		t.Fatalf("err = %v", err)
	}
	if ce.Key.Key != "c" || len(ce.Holders) != 1 || ce.Holders[0].Owner != "X" || ce.Holders[0].Meta["host"] != "h1" {
		t.Fatalf("conflict = %+v", ce)
	}
	for _, k := range []string{"a", "b"} {
		if kv, _ := e.svc.Inspect(ex("k", k)); len(kv.Holders) != 0 || len(kv.Waiters) != 0 {
			t.Fatalf("%s taken: %+v", k, kv)
		}
	}
	after, _ := e.svc.Get(x.ID)
	if !after.ExpiresAt.Equal(before.ExpiresAt) {
		t.Fatalf("X's expiry moved: %v -> %v", before.ExpiresAt, after.ExpiresAt)
	}
	if s := e.svc.Stats(); s.Grants != 1 {
		t.Fatalf("stats %+v", s)
	}
}

// Scenario 4: two clients loop {a,b} and {b,a}: no deadlock, never a
// partial hold. 10,000 iterations with HOSTD_LONG=1.
func TestLeaseScenario4OppositeOrder(t *testing.T) {
	e := newLeaseEnv(t, false)
	loops := 300
	if os.Getenv("HOSTD_LONG") != "" {
		loops = 10000
	}
	var wg sync.WaitGroup
	var inside atomic.Int32
	for c := 0; c < 2; c++ {
		keys := []abi.ResourceKey{ex("k", "a"), ex("k", "b")}
		if c == 1 {
			keys = []abi.ResourceKey{ex("k", "b"), ex("k", "a")}
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < loops; i++ {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				g, err := e.svc.Acquire(ctx, AcquireRequest{Owner: fmt.Sprint("c", c), Keys: keys, Wait: time.Hour})
				cancel()
				if err != nil {
					t.Errorf("acquire: %v", err)
					return
				}
				if inside.Add(1) != 1 {
					t.Error("two holders at once")
				}
				for _, k := range keys {
					if err := e.svc.CheckFence(k, g.Fence); err != nil {
						t.Errorf("partial hold: %v", err)
					}
				}
				inside.Add(-1)
				if err := e.svc.Release(context.Background(), g.ID, g.Token); err != nil {
					t.Errorf("release: %v", err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if s := e.svc.Stats(); s.Grants != 0 || s.Keys != 0 || s.Waiters != 0 {
		t.Fatalf("stats %+v", s)
	}
}

type acqResult struct {
	g   *Grant
	err error
}

func (e *leaseEnv) acquireAsync(ctx context.Context, r AcquireRequest) <-chan acqResult {
	ch := make(chan acqResult, 1)
	go func() {
		g, err := e.svc.Acquire(ctx, r)
		ch <- acqResult{g, err}
	}()
	return ch
}

func waitWaiters(t *testing.T, s *Service, n int) {
	t.Helper()
	waitFor(t, func() bool { return s.Stats().Waiters == n })
}

func recv(t *testing.T, ch <-chan acqResult) acqResult {
	t.Helper()
	select {
	case r := <-ch:
		return r
	case <-time.After(5 * time.Second):
		t.Fatal("acquire did not return")
		return acqResult{}
	}
}

func notYet(t *testing.T, ch <-chan acqResult) {
	t.Helper()
	select {
	case r := <-ch:
		t.Fatalf("returned too early: %+v", r)
	case <-time.After(20 * time.Millisecond):
	}
}

// Scenario 5: readers hold shared, a writer waits: later readers queue
// behind the writer.
func TestLeaseScenario5WriterNotStarved(t *testing.T) {
	e := newLeaseEnv(t, false)
	bg := context.Background()
	r1 := e.acquire("r1", 0, sh("k", "x"))
	w := e.acquireAsync(bg, AcquireRequest{Owner: "w", Keys: []abi.ResourceKey{ex("k", "x")}, Wait: time.Hour})
	waitWaiters(t, e.svc, 1)
	_, err := e.svc.Acquire(bg, AcquireRequest{Owner: "r2", Keys: []abi.ResourceKey{sh("k", "x")}})
	var ce *LeaseConflictError
	if !errors.As(err, &ce) || ce.Waiters != 1 {
		t.Fatalf("reader behind writer: %v", err)
	}
	r2 := e.acquireAsync(bg, AcquireRequest{Owner: "r2", Keys: []abi.ResourceKey{sh("k", "x")}, Wait: time.Hour})
	waitWaiters(t, e.svc, 2)
	kv, _ := e.svc.Inspect(ex("k", "x"))
	if len(kv.Waiters) != 2 || kv.Waiters[0].Owner != "w" || kv.Waiters[1].Owner != "r2" {
		t.Fatalf("inspect %+v", kv)
	}
	notYet(t, r2)
	if err := e.svc.Release(bg, r1.ID, r1.Token); err != nil {
		t.Fatal(err)
	}
	wr := recv(t, w)
	if wr.err != nil {
		t.Fatal(wr.err)
	}
	notYet(t, r2)
	if err := e.svc.Release(bg, wr.g.ID, wr.g.Token); err != nil {
		t.Fatal(err)
	}
	if rr := recv(t, r2); rr.err != nil || rr.g.Fence <= wr.g.Fence {
		t.Fatalf("r2: %+v", rr)
	}
}

// Scenario 6: a waiter whose context ends is removed and never granted.
// Also: a waiter whose Wait runs out gets "locked".
func TestLeaseScenario6CanceledWaiter(t *testing.T) {
	e := newLeaseEnv(t, false)
	bg := context.Background()
	h := e.acquire("h", 0, ex("k", "x"))
	ctx, cancel := context.WithCancel(bg)
	w := e.acquireAsync(ctx, AcquireRequest{Owner: "w", Keys: []abi.ResourceKey{ex("k", "x"), ex("k", "y")}, Wait: time.Hour})
	waitWaiters(t, e.svc, 1)
	cancel()
	wantCode(t, recv(t, w).err, "canceled")
	if s := e.svc.Stats(); s.Waiters != 0 {
		t.Fatalf("waiter left: %+v", s)
	}
	timed := e.acquireAsync(bg, AcquireRequest{Owner: "t", Keys: []abi.ResourceKey{ex("k", "x")}, Wait: 3 * time.Second})
	waitWaiters(t, e.svc, 1)
	e.clock.Advance(4 * time.Second) // wait runs out; h's TTL (10s) does not
	r := recv(t, timed)
	var ce *LeaseConflictError
	if !errors.As(r.err, &ce) || len(ce.Holders) != 1 || ce.Holders[0].Owner != "h" {
		t.Fatalf("timed-out waiter: %v", r.err)
	}
	if err := e.svc.Release(bg, h.ID, h.Token); err != nil {
		t.Fatal(err)
	}
	if s := e.svc.Stats(); s.Grants != 0 || s.Keys != 0 || s.Waiters != 0 {
		t.Fatalf("canceled waiters were granted later: %+v", s)
	}
}

// Scenario 7 (in-process half; the kill -9 half is in cmd/hostd): after a
// restart no fence is reused, unexpired grants hold with their TTL
// restarted, expired ones are gone.
func TestLeaseScenario7Restart(t *testing.T) {
	e := newLeaseEnv(t, true)
	short := e.acquire("short", 2*time.Second, ex("k", "short"))
	long := e.acquire("long", 10*time.Second, ex("k", "long"), sh("k", "shared"))
	e.clock.Advance(8 * time.Second) // long has 2s left; short expired
	e.restart()
	if _, err := e.svc.Get(short.ID); ErrorCode(err) != "not_found" {
		t.Fatalf("expired grant survived: %v", err)
	}
	if err := e.svc.CheckFence(ex("k", "long"), long.Fence); err != nil {
		t.Fatalf("unexpired grant lost: %v", err)
	}
	e.clock.Advance(9 * time.Second) // TTL restarted at boot: 10s from now
	if err := e.svc.CheckFence(ex("k", "long"), long.Fence); err != nil {
		t.Fatalf("restart shortened the grant: %v", err)
	}
	// A second restart keeps the restarted expiry (it was persisted).
	e.restart()
	if err := e.svc.CheckFence(sh("k", "shared"), long.Fence); err != nil {
		t.Fatalf("second restart lost the grant: %v", err)
	}
	// The holder can still release with its token.
	if err := e.svc.Release(context.Background(), long.ID, long.Token); err != nil {
		t.Fatal(err)
	}
	n := e.acquire("new", 0, ex("k", "short"))
	if n.Fence <= long.Fence {
		t.Fatalf("fence reused after restart: %d <= %d", n.Fence, long.Fence)
	}
	e.restart()
	// Expired after restart: the restarted TTL runs out.
	e.clock.Advance(11 * time.Second)
	if err := e.svc.CheckFence(ex("k", "short"), n.Fence); err == nil {
		t.Fatal("grant outlived its restarted TTL")
	}
}

// A takeover (cluster mode: a new leader on another machine, hard part
// 9): a grant whose stored expiry has passed on this clock is not
// dropped — the clock that says so is not the one that granted it — but
// restored with its full TTL from the takeover, and it expires only when
// that runs out.
func TestLeaseTakeoverKeepsGrantsExpiredOnThisClock(t *testing.T) {
	e := newLeaseEnv(t, true)
	k := ex("k", "t")
	g := e.acquire("A", 2*time.Second, k)
	// The old leader dies holding the grant (closed first: a live service
	// would reap the grant itself once its own clock passed the expiry).
	e.close()
	e.clock.Advance(5 * time.Second) // past its expiry on the new leader's clock
	e.takeover = true
	e.store = openStore(t, e.dir, e.sync)
	e.open()
	if err := e.svc.CheckFence(k, g.Fence); err != nil {
		t.Fatalf("takeover dropped a grant on its own clock: %v", err)
	}
	e.clock.Advance(1500 * time.Millisecond) // full TTL (2s) from the takeover
	if err := e.svc.CheckFence(k, g.Fence); err != nil {
		t.Fatalf("takeover shortened the grant: %v", err)
	}
	e.clock.Advance(time.Second)
	if err := e.svc.CheckFence(k, g.Fence); err == nil {
		t.Fatal("the grant outlived its TTL from the takeover")
	}
	if b := e.acquire("B", 0, k); b.Fence <= g.Fence {
		t.Fatalf("fence %d after %d", b.Fence, g.Fence)
	}
}

// Scenario 8: the wall clock stepped an hour either way while running:
// nothing expires early or late.
func TestLeaseScenario8WallClockStep(t *testing.T) {
	e := newLeaseEnv(t, false)
	k := ex("k", "w")
	g := e.acquire("A", 10*time.Second, k)
	e.clock.StepWall(time.Hour)
	e.clock.Advance(9 * time.Second)
	if err := e.svc.CheckFence(k, g.Fence); err != nil {
		t.Fatalf("expired early after a forward step: %v", err)
	}
	e.clock.StepWall(-2 * time.Hour)
	e.clock.Advance(2 * time.Second)
	if err := e.svc.CheckFence(k, g.Fence); err == nil {
		t.Fatal("not expired after a backward step")
	}
	waitFor(t, func() bool { return e.svc.Stats().Grants == 0 })
}

// Scenario 9: ForceRelease bumps the fence, the evicted holder's fence is
// stale, a fenced write prepared before the eviction cannot commit, and
// the audit record is readable.
func TestLeaseScenario9ForceRelease(t *testing.T) {
	e := newLeaseEnv(t, true)
	bg := context.Background()
	k := ex("k", "f")
	g := e.acquire("A", 0, k, ex("k", "other"))
	chk, err := e.svc.FenceCheck(k, g.Fence)
	if err != nil {
		t.Fatal(err)
	}
	// A fenced write commits while the fence is current...
	if _, err := e.store.Commit(bg, &catalog.Batch{Checks: []catalog.Check{chk}, Ops: []catalog.Op{{Key: []byte("pkv/test/a"), Value: []byte("1")}}}); err != nil {
		t.Fatalf("fenced write with a current fence: %v", err)
	}
	_, err = e.svc.ForceRelease(bg, k, "", "", "admin")
	wantCode(t, err, "invalid_argument")
	res, err := e.svc.ForceRelease(bg, k, "", "stuck deploy", "admin")
	if err != nil {
		t.Fatal(err)
	}
	if res.Fence <= g.Fence || len(res.Evicted) != 1 || res.Evicted[0].ID != g.ID {
		t.Fatalf("result %+v", res)
	}
	wantCode(t, e.svc.CheckFence(k, g.Fence), "not_holder")
	// ...and is rejected once it is stale, even though it was checked before.
	_, err = e.store.Commit(bg, &catalog.Batch{Checks: []catalog.Check{chk}, Ops: []catalog.Op{{Key: []byte("pkv/test/a"), Value: []byte("2")}}})
	if !errors.Is(err, catalog.ErrConflict) {
		t.Fatalf("stale fenced write: %v", err)
	}
	wantCode(t, e.svc.Release(bg, g.ID, g.Token), "not_holder")
	// The whole grant was evicted, "other" too.
	if kv, _ := e.svc.Inspect(ex("k", "other")); len(kv.Holders) != 0 {
		t.Fatalf("other still held: %+v", kv)
	}
	n := e.acquire("B", 0, k)
	if n.Fence <= res.Fence {
		t.Fatalf("new fence %d not above bumped %d", n.Fence, res.Fence)
	}
	audit, err := e.svc.Audit(bg, 0, 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(audit) != 1 || audit[0].GrantID != g.ID || audit[0].Reason != "stuck deploy" || audit[0].Actor != "admin" || audit[0].NewFence != res.Fence || audit[0].OldFence != g.Fence {
		t.Fatalf("audit %+v", audit)
	}
	_, err = e.svc.ForceRelease(bg, ex("k", "free"), "", "x", "admin")
	wantCode(t, err, "not_found")
}

// Scenario 12: many distinct keys locked and released: memory and the
// catalog return to baseline. 1M keys with HOSTD_LONG=1.
func TestLeaseScenario12ManyKeys(t *testing.T) {
	e := newLeaseEnv(t, false)
	n := 3000
	if os.Getenv("HOSTD_LONG") != "" {
		n = 1_000_000
	}
	runtime.GC()
	var before runtime.MemStats
	runtime.ReadMemStats(&before)
	const workers = 16
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < n; i += workers {
				g, err := e.svc.Acquire(context.Background(), AcquireRequest{Owner: "o", Keys: []abi.ResourceKey{ex("many", fmt.Sprint(i))}})
				if err != nil {
					t.Error(err)
					return
				}
				if err := e.svc.Release(context.Background(), g.ID, g.Token); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if s := e.svc.Stats(); s.Grants != 0 || s.Keys != 0 || s.Waiters != 0 {
		t.Fatalf("stats %+v", s)
	}
	records := 0
	_ = e.store.View(context.Background(), func(r catalog.Reader) error {
		return r.Scan([]byte(catalog.NSLock), []byte(catalog.NSLock+"~"), func(catalog.KV) error { records++; return nil })
	})
	if records != 0 {
		t.Fatalf("%d lock records left in the catalog", records)
	}
	runtime.GC()
	var after runtime.MemStats
	runtime.ReadMemStats(&after)
	// The bounded recent-set (8192 entries) and Badger's caches are the
	// only growth allowed; per-key state must be gone.
	if grow := int64(after.HeapAlloc) - int64(before.HeapAlloc); grow > 64<<20 {
		t.Fatalf("heap grew by %d bytes", grow)
	}
}

// Scenario 13: shutdown with waiters: they get a clear error, no hang.
func TestLeaseScenario13CloseWithWaiters(t *testing.T) {
	e := newLeaseEnv(t, false)
	e.acquire("h", 0, ex("k", "x"))
	var chans []<-chan acqResult
	for i := 0; i < 5; i++ {
		chans = append(chans, e.acquireAsync(context.Background(), AcquireRequest{Owner: fmt.Sprint("w", i), Keys: []abi.ResourceKey{ex("k", "x")}, Wait: time.Hour}))
	}
	waitWaiters(t, e.svc, 5)
	if err := e.svc.Close(); err != nil {
		t.Fatal(err)
	}
	for _, ch := range chans {
		if r := recv(t, ch); !errors.Is(r.err, ErrClosed) {
			t.Fatalf("waiter got %v", r.err)
		}
	}
	_, err := e.svc.Acquire(context.Background(), AcquireRequest{Owner: "late", Keys: []abi.ResourceKey{ex("k", "z")}})
	wantCode(t, err, "unavailable")
}

func TestLeaseIdempotentAcquire(t *testing.T) {
	e := newLeaseEnv(t, true)
	bg := context.Background()
	req := AcquireRequest{Owner: "A", IdempotencyKey: "req-1", Keys: []abi.ResourceKey{ex("k", "i")}}
	var wg sync.WaitGroup
	res := make([]*Grant, 8)
	for i := range res {
		wg.Add(1)
		go func() {
			defer wg.Done()
			g, err := e.svc.Acquire(bg, req)
			if err != nil {
				t.Error(err)
			}
			res[i] = g
		}()
	}
	wg.Wait()
	dups := 0
	for _, g := range res {
		if g == nil {
			t.FailNow()
		}
		if g.ID != res[0].ID || g.Token != res[0].Token {
			t.Fatalf("different grants: %+v vs %+v", g, res[0])
		}
		if g.Duplicate {
			dups++
		}
	}
	if dups != 7 {
		t.Fatalf("%d duplicates, want 7", dups)
	}
	// Survives a restart.
	e.restart()
	g, err := e.svc.Acquire(bg, req)
	if err != nil || g.ID != res[0].ID || !g.Duplicate {
		t.Fatalf("after restart: %+v %v", g, err)
	}
	// Same key, other keys: a different request (conflict, see
	// TestLeaseIdempotencyFingerprint).
	_, err = e.svc.Acquire(bg, AcquireRequest{Owner: "A", IdempotencyKey: "req-1", Keys: []abi.ResourceKey{ex("k", "other")}})
	wantCode(t, err, "conflict")
	// Another principal with the same request never gets the grant.
	_, err = e.svc.Acquire(bg, AcquireRequest{Owner: "A", IdempotencyKey: "req-1", Keys: []abi.ResourceKey{ex("k", "i")}, Principal: "token:other"})
	wantCode(t, err, "locked")
}

func TestLeaseReleaseSemantics(t *testing.T) {
	e := newLeaseEnv(t, true)
	bg := context.Background()
	g := e.acquire("A", 0, ex("k", "r"))
	wantCode(t, e.svc.Release(bg, g.ID, "bad-token"), "not_holder")
	if err := e.svc.CheckFence(ex("k", "r"), g.Fence); err != nil {
		t.Fatalf("wrong-token release changed something: %v", err)
	}
	if err := e.svc.Release(bg, g.ID, g.Token); err != nil {
		t.Fatal(err)
	}
	if err := e.svc.Release(bg, g.ID, g.Token); err != nil {
		t.Fatalf("second release: %v", err)
	}
	wantCode(t, e.svc.Release(bg, "nope", "x"), "not_holder")
	wantCode(t, e.svc.Release(bg, "999", "x"), "not_holder")
}

func TestLeaseValidation(t *testing.T) {
	e := newLeaseEnv(t, false)
	bg := context.Background()
	for _, tc := range []struct {
		name string
		req  AcquireRequest
		code string
	}{
		{"no owner", AcquireRequest{Keys: []abi.ResourceKey{ex("k", "v")}}, "invalid_argument"},
		{"no keys", AcquireRequest{Owner: "o"}, "invalid_key"},
		{"empty key", AcquireRequest{Owner: "o", Keys: []abi.ResourceKey{ex("k", "")}}, "invalid_key"},
		{"ttl too long", AcquireRequest{Owner: "o", TTL: time.Hour, Keys: []abi.ResourceKey{ex("k", "v")}}, "ttl_too_long"},
		{"negative ttl", AcquireRequest{Owner: "o", TTL: -1, Keys: []abi.ResourceKey{ex("k", "v")}}, "invalid_argument"},
		{"negative wait", AcquireRequest{Owner: "o", Wait: -1, Keys: []abi.ResourceKey{ex("k", "v")}}, "invalid_argument"},
		{"huge meta", AcquireRequest{Owner: "o", Meta: map[string]string{"a": string(make([]byte, MaxMetaBytes+1))}, Keys: []abi.ResourceKey{ex("k", "v")}}, "invalid_argument"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := e.svc.Acquire(bg, tc.req)
			wantCode(t, err, tc.code)
		})
	}
	if s := e.svc.Stats(); s.Grants != 0 || s.Keys != 0 {
		t.Fatalf("bad input changed state: %+v", s)
	}
	if err := (Options{}).Validate(); err == nil {
		t.Fatal("Validate accepted a missing store")
	}
	if err := (Options{Store: e.store, DefaultTTL: time.Hour, MaxTTL: time.Minute}).Validate(); err == nil {
		t.Fatal("Validate accepted DefaultTTL > MaxTTL")
	}
}

// Hammer: many goroutines acquire/renew/release a few keys with short
// TTLs and random waits while the clock moves; the exclusion invariant is
// checked through CheckFence and a shadow, and everything drains.
func TestLeaseHammer(t *testing.T) {
	e := newLeaseEnv(t, false)
	stop := make(chan struct{})
	var tick sync.WaitGroup
	tick.Add(1)
	go func() {
		defer tick.Done()
		for {
			select {
			case <-stop:
				return
			case <-time.After(200 * time.Microsecond):
				e.clock.Advance(50 * time.Millisecond)
			}
		}
	}()
	var wg sync.WaitGroup
	var granted atomic.Int64
	for c := 0; c < 12; c++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 150; i++ {
				k := abi.ResourceKey{Domain: "h", Key: fmt.Sprint((c + i) % 3), Mode: abi.LockMode(i % 2)}
				ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
				g, err := e.svc.Acquire(ctx, AcquireRequest{Owner: fmt.Sprint("c", c), Keys: []abi.ResourceKey{k}, TTL: time.Second, Wait: time.Duration(i%3) * 100 * time.Millisecond})
				cancel()
				if err != nil {
					if c := ErrorCode(err); c != "locked" && c != "canceled" {
						t.Errorf("acquire: %v", err)
					}
					continue
				}
				granted.Add(1)
				if i%4 == 0 {
					if _, err := e.svc.Renew(context.Background(), g.ID, g.Token, 0); err != nil && ErrorCode(err) != "expired" {
						t.Errorf("renew: %v", err)
					}
				}
				if err := e.svc.Release(context.Background(), g.ID, g.Token); err != nil && ErrorCode(err) != "not_holder" {
					t.Errorf("release: %v", err)
				}
			}
		}()
	}
	wg.Wait()
	close(stop)
	tick.Wait()
	e.clock.Advance(time.Minute)
	waitFor(t, func() bool { s := e.svc.Stats(); return s.Grants == 0 && s.Keys == 0 && s.Waiters == 0 })
	if granted.Load() == 0 {
		t.Fatal("nothing granted")
	}
}

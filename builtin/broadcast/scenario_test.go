package broadcast

import (
	"context"
	"errors"
	"fmt"
	"math/rand"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hostd-dev/hostd/runtime/catalog"
	"github.com/hostd-dev/hostd/sdk/abi"
)

// Scenario 1: a conflicting broadcast is not persisted before the running
// one reaches TOMBSTONE; non-conflicting callbacks overlap in time.
func TestScenario1ConflictSerializesNonConflictOverlaps(t *testing.T) {
	release := make(chan struct{})
	started := make(chan uint64, 8)
	v := newEnv(t, vcs(2), nil, func(e *Engine) {
		e.Register("block", fnHandler{ack: func(ctx context.Context, c *AckCall) (AckResult, error) {
			started <- c.BroadcastID
			select {
			case <-release:
			case <-ctx.Done():
			}
			return AckResult{}, nil
		}}, TypeOptions{})
	})
	ctx := context.Background()
	x := []abi.ResourceKey{key("collection", "db.x", abi.Exclusive)}
	a := v.submit(ctx, Request{Message: Message{Type: "block"}, VChannels: vcs(2), ResourceKeys: x, Wait: WaitPersisted})
	<-started
	bDone := make(chan *Result, 1)
	go func() {
		r, err := v.e.Submit(ctx, &Request{Message: Message{Type: NoopType}, VChannels: vcs(1), ResourceKeys: x})
		if err != nil {
			t.Error(err)
		}
		bDone <- r
	}()
	time.Sleep(100 * time.Millisecond)
	if l, _ := v.e.List(Filter{}); len(l) != 1 {
		t.Fatalf("conflicting broadcast persisted while the first runs: %d tasks", len(l))
	}
	close(release)
	b := <-bDone
	if b.State != StateTombstone || b.ID <= a.ID {
		t.Fatalf("b = %+v, a = %d", b, a.ID)
	}

	// Non-conflicting: two callbacks must be running at the same time.
	var mu sync.Mutex
	type span struct{ from, to time.Time }
	spans := map[uint64]*span{}
	both := make(chan struct{})
	var n atomic.Int32
	v2 := newEnv(t, vcs(2), nil, func(e *Engine) {
		e.Register("overlap", fnHandler{ack: func(ctx context.Context, c *AckCall) (AckResult, error) {
			mu.Lock()
			spans[c.BroadcastID] = &span{from: time.Now()}
			mu.Unlock()
			if n.Add(1) == 2 {
				close(both)
			}
			select {
			case <-both:
			case <-time.After(5 * time.Second):
				return AckResult{}, Permanent(errors.New("callbacks did not overlap"))
			}
			time.Sleep(10 * time.Millisecond)
			mu.Lock()
			spans[c.BroadcastID].to = time.Now()
			mu.Unlock()
			return AckResult{}, nil
		}}, TypeOptions{})
	})
	var wg sync.WaitGroup
	for i := 0; i < 2; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			r, err := v2.e.Submit(ctx, &Request{Message: Message{Type: "overlap"}, VChannels: vcs(2),
				ResourceKeys: []abi.ResourceKey{key("collection", fmt.Sprint("c", i), abi.Exclusive)}})
			if err != nil || r.State != StateTombstone {
				t.Errorf("overlap %d: %+v %v", i, r, err)
			}
		}(i)
	}
	wg.Wait()
	var ss []*span
	for _, s := range spans {
		ss = append(ss, s)
	}
	if len(ss) != 2 || !(ss[0].from.Before(ss[1].to) && ss[1].from.Before(ss[0].to)) {
		t.Fatalf("callback intervals do not overlap: %+v", ss)
	}
}

// Scenario 2: opposite-order multi-key requests never deadlock.
func TestScenario2OppositeOrderNoDeadlock(t *testing.T) {
	v := newEnv(t, vcs(1), nil, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			ks := []abi.ResourceKey{key("collection", "a", abi.Exclusive), key("collection", "b", abi.Exclusive)}
			if g%2 == 1 {
				ks[0], ks[1] = ks[1], ks[0]
			}
			for i := 0; i < 10; i++ {
				if _, err := v.e.Submit(ctx, &Request{Message: Message{Type: NoopType}, VChannels: vcs(1), ResourceKeys: ks}); err != nil {
					t.Error(err)
					return
				}
			}
		}(g)
	}
	wg.Wait()
	if c := v.e.Counts(); c[StateTombstone] != 80 {
		t.Fatalf("counts %v", c)
	}
}

// Scenario 3: 30% random append failures: every broadcast completes, no
// vchannel holds a message twice.
func TestScenario3FlakyAppends(t *testing.T) {
	var flaky *flakyChannels
	v := newEnv(t, vcs(4), func(o *Options) {
		flaky = &flakyChannels{Channels: o.Channels, rnd: rand.New(rand.NewSource(1)), frac: 0.3}
		o.Channels = flaky
	}, nil)
	ctx := context.Background()
	var wg sync.WaitGroup
	for i := 0; i < 40; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r, err := v.e.Submit(ctx, &Request{Message: Message{Type: NoopType}, VChannels: vcs(4)})
			if err != nil || r.State != StateTombstone || len(r.Appends) != 5 {
				t.Errorf("%+v %v", r, err)
			}
		}()
	}
	wg.Wait()
	if flaky.n == 0 {
		t.Fatal("no failure was injected")
	}
	per := v.assertNoDuplicates(vcs(4)...)
	if len(per) != 40 {
		t.Fatalf("%d broadcasts on the control channel, want 40", len(per))
	}
	// Attempts are visible per vchannel.
	l, _ := v.e.List(Filter{})
	retried := 0
	for _, in := range l {
		for _, s := range in.VChannels {
			if s.Attempts > 1 {
				retried++
			}
		}
	}
	if retried == 0 {
		t.Fatal("no vchannel shows a retried append")
	}
}

// Scenario 4: locks taken and released without broadcasting (validator
// rejection, idempotency hit) free the keys.
func TestScenario4LocksFreedWithoutBroadcast(t *testing.T) {
	v := newEnv(t, vcs(1), nil, func(e *Engine) {
		e.Register("reject", fnHandler{validate: func(*Message, catalog.Reader) error { return errors.New("no") }}, TypeOptions{})
	})
	ctx := context.Background()
	ks := []abi.ResourceKey{key("collection", "x", abi.Exclusive)}
	_, err := v.e.Submit(ctx, &Request{Message: Message{Type: "reject"}, ResourceKeys: ks})
	var rej *RejectedError
	if !errors.As(err, &rej) || !errors.Is(err, ErrRejected) {
		t.Fatalf("want rejection, got %v", err)
	}
	if g, err := v.locker.TryLock("probe", withClusterKey(ks)); err != nil {
		t.Fatalf("keys still held after rejection: %v", err)
	} else {
		g.Unlock()
	}
	v.submit(ctx, Request{Message: Message{Type: NoopType}, ResourceKeys: ks, IdempotencyKey: "k"})
	if r := v.submit(ctx, Request{Message: Message{Type: NoopType}, ResourceKeys: ks, IdempotencyKey: "k"}); !r.Duplicate {
		t.Fatal("want duplicate")
	}
	if g, err := v.locker.TryLock("probe", withClusterKey(ks)); err != nil {
		t.Fatalf("keys still held after duplicate: %v", err)
	} else {
		g.Unlock()
	}
	if l, _ := v.e.List(Filter{}); len(l) != 1 {
		t.Fatalf("%d tasks, want 1", len(l))
	}
}

// Scenario 5: 8 concurrent same-key broadcasts: one task, one original.
func TestScenario5ConcurrentSameKey(t *testing.T) {
	v := newEnv(t, vcs(2), nil, func(e *Engine) {
		e.Register("slow", fnHandler{ack: func(context.Context, *AckCall) (AckResult, error) {
			time.Sleep(20 * time.Millisecond)
			return AckResult{}, nil
		}}, TypeOptions{})
	})
	var wg sync.WaitGroup
	res := make([]*Result, 8)
	for i := range res {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			// Different resource keys: the reservation still serializes them.
			r, err := v.e.Submit(context.Background(), &Request{Message: Message{Type: "slow"}, VChannels: vcs(2),
				IdempotencyKey: "same", ResourceKeys: []abi.ResourceKey{key("collection", fmt.Sprint(i), abi.Exclusive)}})
			if err != nil {
				t.Error(err)
			}
			res[i] = r
		}(i)
	}
	wg.Wait()
	originals := 0
	for _, r := range res {
		if r.ID != res[0].ID || r.State != StateTombstone || len(r.Appends) != 3 {
			t.Fatalf("results differ: %+v vs %+v", r, res[0])
		}
		if !r.Duplicate {
			originals++
		}
	}
	if originals != 1 {
		t.Fatalf("%d originals", originals)
	}
	if l, _ := v.e.List(Filter{}); len(l) != 1 {
		t.Fatalf("%d tasks", len(l))
	}
}

// Scenario 6: same key with another type or another scope is new.
func TestScenario6KeyScopeAndType(t *testing.T) {
	v := newEnv(t, nil, nil, func(e *Engine) { e.Register("other", Noop{}, TypeOptions{}) })
	ctx := context.Background()
	a := v.submit(ctx, Request{Message: Message{Type: NoopType}, IdempotencyKey: "k"})
	b := v.submit(ctx, Request{Message: Message{Type: "other"}, IdempotencyKey: "k"})
	c := v.submit(ctx, Request{Message: Message{Type: NoopType}, IdempotencyKey: "k", Scope: Scope{Kind: "database", ID: "1"}})
	d := v.submit(ctx, Request{Message: Message{Type: NoopType}, IdempotencyKey: "k", Scope: Scope{Kind: "collection", ID: "1"}})
	// A client key containing ':' cannot forge the database:1 scope.
	e := v.submit(ctx, Request{Message: Message{Type: NoopType}, IdempotencyKey: "database:1:k"})
	f := v.submit(ctx, Request{Message: Message{Type: NoopType}, IdempotencyKey: "1:k", Scope: Scope{Kind: "database"[:8], ID: "database"}})
	ids := map[uint64]bool{}
	for _, r := range []*Result{a, b, c, d, e, f} {
		if r.Duplicate || ids[r.ID] {
			t.Fatalf("want a new broadcast, got %+v", r)
		}
		ids[r.ID] = true
	}
	if g := v.submit(ctx, Request{Message: Message{Type: NoopType}, IdempotencyKey: "k", Scope: Scope{Kind: "database", ID: "1"}}); !g.Duplicate || g.ID != c.ID {
		t.Fatalf("want duplicate of %d, got %+v", c.ID, g)
	}
	// Cluster scope spelled "" and "cluster" is the same scope.
	if g := v.submit(ctx, Request{Message: Message{Type: NoopType}, IdempotencyKey: "k", Scope: Scope{Kind: "cluster"}}); !g.Duplicate || g.ID != a.ID {
		t.Fatalf("want duplicate of %d, got %+v", a.ID, g)
	}
}

// Scenario 7: a duplicate of an unfinished original waits; a caller
// timeout returns an error, not the ID.
func TestScenario7DuplicateWaitsTimeout(t *testing.T) {
	release := make(chan struct{})
	v := newEnv(t, nil, nil, func(e *Engine) {
		e.Register("block", fnHandler{ack: func(ctx context.Context, c *AckCall) (AckResult, error) {
			select {
			case <-release:
			case <-ctx.Done():
			}
			return AckResult{}, nil
		}}, TypeOptions{})
	})
	ctx := context.Background()
	a := v.submit(ctx, Request{Message: Message{Type: "block"}, IdempotencyKey: "k", Wait: WaitPersisted})
	tctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	r, err := v.e.Submit(tctx, &Request{Message: Message{Type: "block"}, IdempotencyKey: "k"})
	if !errors.Is(err, context.DeadlineExceeded) || r != nil {
		t.Fatalf("want timeout without an ID, got %+v, %v", r, err)
	}
	got := make(chan *Result, 1)
	go func() {
		r, _ := v.e.Submit(ctx, &Request{Message: Message{Type: "block"}, IdempotencyKey: "k"})
		got <- r
	}()
	select {
	case r := <-got:
		t.Fatalf("duplicate returned before the original finished: %+v", r)
	case <-time.After(50 * time.Millisecond):
	}
	close(release)
	if r := <-got; r == nil || r.ID != a.ID || !r.Duplicate || r.State != StateTombstone {
		t.Fatalf("got %+v", r)
	}
}

// Scenario 8: a duplicate of a FAILED original returns the original and
// its FAILED state; the failure released the locks.
func TestScenario8DuplicateOfFailed(t *testing.T) {
	v := newEnv(t, nil, nil, func(e *Engine) {
		e.Register("perm", fnHandler{ack: func(context.Context, *AckCall) (AckResult, error) {
			return AckResult{}, Permanent(errors.New("cannot do it"))
		}}, TypeOptions{})
		e.Register("flaky", fnHandler{ack: func(context.Context, *AckCall) (AckResult, error) {
			return AckResult{}, errors.New("try again")
		}}, TypeOptions{MaxAttempts: 3})
	})
	ctx := context.Background()
	ks := []abi.ResourceKey{key("collection", "x", abi.Exclusive)}
	a := v.submit(ctx, Request{Message: Message{Type: "perm"}, IdempotencyKey: "k", ResourceKeys: ks})
	if a.State != StateFailed || a.Error == "" {
		t.Fatalf("%+v", a)
	}
	d := v.submit(ctx, Request{Message: Message{Type: "perm"}, IdempotencyKey: "k"})
	if d.ID != a.ID || !d.Duplicate || d.State != StateFailed || d.Error != a.Error {
		t.Fatalf("%+v", d)
	}
	if g, err := v.locker.TryLock("probe", ks); err != nil {
		t.Fatalf("FAILED task still holds keys: %v", err)
	} else {
		g.Unlock()
	}
	f := v.submit(ctx, Request{Message: Message{Type: "flaky"}})
	in, _ := v.e.Get(f.ID)
	if f.State != StateFailed || in.Attempts != 3 {
		t.Fatalf("max_attempts: %+v %+v", f, in)
	}
}

// fakeClock is a settable wall clock; After uses real time so backoffs
// still fire.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}
func (c *fakeClock) After(d time.Duration) <-chan time.Time { return time.After(d) }
func (c *fakeClock) Add(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

// Scenario 10: GC by count and by age; a restart does not extend the age;
// IDs are never reused after GC.
func TestScenario10GC(t *testing.T) {
	clk := &fakeClock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	v := newEnv(t, nil, func(o *Options) {
		o.Clock = clk
		o.MaxCount = 3
		o.CheckInterval = time.Hour
	}, nil)
	ctx := context.Background()
	var ids []uint64
	for i := 0; i < 5; i++ {
		ids = append(ids, v.submit(ctx, Request{Message: Message{Type: NoopType}, IdempotencyKey: fmt.Sprint(i)}).ID)
		clk.Add(time.Second)
	}
	if err := v.e.GC(ctx); err != nil {
		t.Fatal(err)
	}
	l, _ := v.e.List(Filter{})
	if len(l) != 3 || l[0].ID != ids[2] {
		t.Fatalf("after count GC: %+v", l)
	}
	// The idempotency window ends with the tombstone.
	if r := v.submit(ctx, Request{Message: Message{Type: NoopType}, IdempotencyKey: "0"}); r.Duplicate || r.ID <= ids[4] {
		t.Fatalf("GC'd key must start a new broadcast with a new ID: %+v", r)
	}
	// Age: restart 23h later; the restart must not restamp completion.
	clk.Add(23 * time.Hour)
	v.restart()
	if l, _ := v.e.List(Filter{}); len(l) != 3 {
		t.Fatalf("before max_lifetime: %d tasks", len(l))
	}
	fresh := v.submit(ctx, Request{Message: Message{Type: NoopType}})
	clk.Add(90 * time.Minute) // the first ones are now 24.5h old
	v.restart()               // GC runs at start
	l, _ = v.e.List(Filter{})
	if len(l) != 1 || l[0].ID != fresh.ID {
		t.Fatalf("after max_lifetime: %+v", l)
	}
}

// Scenario 11: AckSyncUp: the callback runs only after the last vchannel's
// ack; repeated acks change nothing.
func TestScenario11AckSyncUp(t *testing.T) {
	var calls atomic.Int32
	v := newEnv(t, vcs(3), nil, func(e *Engine) {
		e.Register("sync", fnHandler{ack: func(context.Context, *AckCall) (AckResult, error) {
			calls.Add(1)
			return AckResult{}, nil
		}}, TypeOptions{AckSyncUp: true})
	})
	ctx := context.Background()
	r := v.submit(ctx, Request{Message: Message{Type: "sync"}, VChannels: vcs(3), Wait: WaitAppended})
	if r.State != StatePending || len(r.Appends) != 4 {
		t.Fatalf("%+v", r)
	}
	in, _ := v.e.Get(r.ID)
	if len(in.MissingAcks) != 3 {
		t.Fatalf("missing acks %v", in.MissingAcks)
	}
	if err := v.e.Ack(ctx, r.ID, "nope/0"); !errors.Is(err, ErrUnknownVChannel) {
		t.Fatalf("unknown vchannel: %v", err)
	}
	if err := v.e.Ack(ctx, r.ID+1000, "t/0"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("unknown task: %v", err)
	}
	for i, vc := range vcs(3) {
		for rep := 0; rep < 2; rep++ {
			if err := v.e.Ack(ctx, r.ID, vc); err != nil {
				t.Fatal(err)
			}
		}
		if i < 2 {
			time.Sleep(20 * time.Millisecond)
			if calls.Load() != 0 {
				t.Fatalf("callback ran after %d of 3 acks", i+1)
			}
			in, _ := v.e.Get(r.ID)
			if len(in.MissingAcks) != 2-i {
				t.Fatalf("missing %v", in.MissingAcks)
			}
		}
	}
	v.waitState(r.ID, StateTombstone)
	if err := v.e.Ack(ctx, r.ID, "t/0"); err != nil {
		t.Fatalf("ack after finish must be a no-op: %v", err)
	}
	if calls.Load() != 1 {
		t.Fatalf("%d callback runs", calls.Load())
	}
	// Acks survive a restart.
	r2 := v.submit(ctx, Request{Message: Message{Type: "sync"}, VChannels: vcs(3), Wait: WaitAppended})
	v.e.Ack(ctx, r2.ID, "t/0")
	v.restart()
	in, _ = v.e.Get(r2.ID)
	if len(in.MissingAcks) != 2 {
		t.Fatalf("after restart missing %v", in.MissingAcks)
	}
	v.e.Ack(ctx, r2.ID, "t/1")
	v.e.Ack(ctx, r2.ID, "t/2")
	v.waitState(r2.ID, StateTombstone)
}

// Scenario 13/14 (Go handler version; the Wasm version is in
// plugin_test.go): callback KV effects are committed with the tombstone,
// conflicts re-run, the counter is exact.
func counterHandler(store func() catalog.Store, runs *atomic.Int32) fnHandler {
	return fnHandler{ack: func(ctx context.Context, c *AckCall) (AckResult, error) {
		runs.Add(1)
		k := []byte(catalog.NSPluginKV + "test/counter")
		var cur uint64
		var ver catalog.Version
		err := store().View(ctx, func(r catalog.Reader) error {
			v, vv, err := r.Get(k)
			if errors.Is(err, catalog.ErrNotFound) {
				return nil
			}
			if err != nil {
				return err
			}
			ver = vv
			cur, err = strconv.ParseUint(string(v), 10, 64)
			return err
		})
		if err != nil {
			return AckResult{}, err
		}
		return AckResult{
			Checks: []catalog.Check{{Key: k, Version: ver}},
			Ops: []catalog.Op{{Key: k, Value: []byte(strconv.FormatUint(cur+1, 10))},
				{Key: []byte(fmt.Sprintf("%stest/seen/%d", catalog.NSPluginKV, c.BroadcastID)), Value: []byte("1")}},
		}, nil
	}}
}

func readCounter(t *testing.T, st catalog.Store) uint64 {
	var n uint64
	st.View(context.Background(), func(r catalog.Reader) error {
		v, _, err := r.Get([]byte(catalog.NSPluginKV + "test/counter"))
		if err == nil {
			n, _ = strconv.ParseUint(string(v), 10, 64)
		}
		return nil
	})
	return n
}

func TestScenario14CounterExact(t *testing.T) {
	var runs atomic.Int32
	ref := &storeRef{}
	v := newEnv(t, vcs(1), ref.set, func(e *Engine) {
		e.Register("count", counterHandler(ref.get, &runs), TypeOptions{MaxAttempts: 1})
	})
	var wg sync.WaitGroup
	for i := 0; i < 100; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			r, err := v.e.Submit(context.Background(), &Request{Message: Message{Type: "count"}, VChannels: vcs(1),
				ResourceKeys: []abi.ResourceKey{key("collection", fmt.Sprint(i), abi.Exclusive)}})
			if err != nil || r.State != StateTombstone {
				t.Errorf("%+v %v", r, err)
			}
		}(i)
	}
	wg.Wait()
	if n := readCounter(t, v.store); n != 100 {
		t.Fatalf("counter %d, want 100 (runs %d)", n, runs.Load())
	}
	conflicts := 0
	l, _ := v.e.List(Filter{})
	for _, in := range l {
		conflicts += in.Conflicts
		if in.Attempts != 1 {
			t.Fatalf("conflict re-run counted as an attempt: %+v", in)
		}
	}
	t.Logf("runs %d, conflict re-runs %d", runs.Load(), conflicts)
	if int(runs.Load()) != 100+conflicts {
		t.Fatalf("runs %d != 100 + conflicts %d", runs.Load(), conflicts)
	}
}

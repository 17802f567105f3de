package broadcast

import (
	"context"
	"errors"
	"fmt"
	"math/rand"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/hostd-dev/hostd/runtime/catalog"
	"github.com/hostd-dev/hostd/sdk/abi"
)

// Admin abandon and retry: who/why kept, locks released on abandon and
// re-taken (blocking) before the retry is saved, new control-channel order.
func TestAbandonAndRetry(t *testing.T) {
	var ok atomic.Bool
	v := newEnv(t, vcs(1), nil, func(e *Engine) {
		e.Register("stuck", fnHandler{ack: func(context.Context, *AckCall) (AckResult, error) {
			if ok.Load() {
				return AckResult{}, nil
			}
			return AckResult{}, errors.New("downstream unavailable")
		}}, TypeOptions{})
	})
	ctx := context.Background()
	ks := []abi.ResourceKey{key("collection", "x", abi.Exclusive)}
	r := v.submit(ctx, Request{Message: Message{Type: "stuck"}, VChannels: vcs(1), ResourceKeys: ks, IdempotencyKey: "k", Wait: WaitPersisted})
	deadline := time.Now().Add(5 * time.Second)
	for {
		in, _ := v.e.Get(r.ID)
		if in.Attempts >= 2 && in.NextRetry != nil && strings.Contains(in.LastError, "downstream") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no visible retries: %+v", in)
		}
		time.Sleep(5 * time.Millisecond)
	}
	if _, err := v.e.Retry(ctx, r.ID); !errors.Is(err, ErrInvalidState) {
		t.Fatalf("retry of PENDING: %v", err)
	}
	in, err := v.e.Abandon(ctx, r.ID, "alice", "downstream gone")
	if err != nil || in.State != StateFailed || in.Abandoned == nil || in.Abandoned.By != "alice" || in.Abandoned.Reason != "downstream gone" {
		t.Fatalf("abandon: %+v %v", in, err)
	}
	if _, err := v.e.Abandon(ctx, r.ID, "alice", "again"); !errors.Is(err, ErrInvalidState) {
		t.Fatalf("second abandon: %v", err)
	}
	if d := v.submit(ctx, Request{Message: Message{Type: "stuck"}, VChannels: vcs(1), IdempotencyKey: "k"}); !d.Duplicate || d.State != StateFailed {
		t.Fatalf("dup of abandoned: %+v", d)
	}
	// Locks were released: someone else takes them, so Retry must wait.
	g, err := v.locker.TryLock("other", ks)
	if err != nil {
		t.Fatalf("abandoned task holds keys: %v", err)
	}
	tctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	_, err = v.e.Retry(tctx, r.ID)
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("retry while keys held: %v", err)
	}
	if in, _ := v.e.Get(r.ID); in.State != StateFailed {
		t.Fatalf("retry saved before taking locks: %+v", in)
	}
	g.Unlock()
	ok.Store(true)
	v.restart() // the abandon survives a restart
	if in, _ := v.e.Get(r.ID); in.State != StateFailed || in.Abandoned == nil {
		t.Fatalf("after restart: %+v", in)
	}
	_, err = v.e.Retry(ctx, r.ID)
	if err != nil {
		t.Fatal(err)
	}
	in = v.waitState(r.ID, StateTombstone)
	if in.Attempts < 3 {
		t.Fatalf("attempts must keep counting: %+v", in)
	}
	per := v.assertNoDuplicates(vcs(1)...)
	if per[r.ID] != 2 {
		t.Fatalf("retry must re-append the control channel (new order): %d", per[r.ID])
	}
}

// Recovery refuses a catalog holding two conflicting PENDING tasks.
func TestRecoveryRefusesConflictingPending(t *testing.T) {
	v := newEnv(t, nil, nil, nil)
	v.close()
	o := catalog.DefaultOptions(v.dir)
	o.GCInterval = 0
	st, err := catalog.Open(o)
	if err != nil {
		t.Fatal(err)
	}
	ks := withClusterKey([]abi.ResourceKey{key("collection", "x", abi.Exclusive)})
	var ops []catalog.Op
	for id := uint64(1); id <= 2; id++ {
		rec := taskRecord{ID: id, State: StatePending, Message: Message{Type: NoopType}, VChannels: []string{ControlChannel}, Keys: ks}
		ops = append(ops, catalog.Op{Key: taskKey(id), Value: mustJSON(&rec)})
	}
	if _, err := st.Commit(context.Background(), &catalog.Batch{Ops: ops}); err != nil {
		t.Fatal(err)
	}
	st.Close()
	err = v.open()
	if !errors.Is(err, ErrCorruptCatalog) || !strings.Contains(err.Error(), "refusing to start") {
		t.Fatalf("want corrupt catalog, got %v", err)
	}
}

// Garbage task records are a clear error, never a panic.
func TestRecoveryGarbageRecord(t *testing.T) {
	v := newEnv(t, nil, nil, nil)
	v.close()
	st, _ := catalog.Open(catalog.DefaultOptions(v.dir))
	st.Commit(context.Background(), &catalog.Batch{Ops: []catalog.Op{{Key: taskKey(7), Value: []byte("{not json")}}})
	st.Close()
	if err := v.open(); !errors.Is(err, ErrCorruptCatalog) {
		t.Fatalf("want corrupt catalog, got %v", err)
	}
}

// failingStore fails a fraction of Commits with a storage error (fault
// injection only).
type failingStore struct {
	catalog.Store
	mu   sync.Mutex
	rnd  *rand.Rand
	frac float64
	n    int
}

var errInjected = errors.New("injected catalog write error")

func (f *failingStore) Commit(ctx context.Context, b *catalog.Batch) (catalog.Version, error) {
	f.mu.Lock()
	fail := f.rnd.Float64() < f.frac
	if fail {
		f.n++
	}
	f.mu.Unlock()
	if fail {
		return 0, errInjected
	}
	return f.Store.Commit(ctx, b)
}

// A catalog write error mid-round: the engine keeps running and retries,
// never panics, never loses a persisted task.
func TestCatalogWriteErrors(t *testing.T) {
	var fs *failingStore
	var runs atomic.Int32
	ref := &storeRef{}
	v := newEnv(t, vcs(2), func(o *Options) {
		ref.set(o)
		fs = &failingStore{Store: o.Store, rnd: rand.New(rand.NewSource(2)), frac: 0.25}
		o.Store = fs
	}, func(e *Engine) {
		e.Register("count", counterHandler(ref.get, &runs), TypeOptions{})
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	ids := make([]uint64, 30)
	for i := range ids {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			for { // a client retrying with its idempotency key
				r, err := v.e.Submit(ctx, &Request{Message: Message{Type: "count"}, VChannels: vcs(2), IdempotencyKey: fmt.Sprint(i),
					ResourceKeys: []abi.ResourceKey{key("collection", fmt.Sprint(i), abi.Exclusive)}})
				if err == nil && r.State == StateTombstone {
					ids[i] = r.ID
					return
				}
				if ctx.Err() != nil {
					t.Errorf("request %d never completed: %v", i, err)
					return
				}
			}
		}(i)
	}
	wg.Wait()
	if fs.n == 0 {
		t.Fatal("no fault injected")
	}
	if n := readCounter(t, v.store); n != 30 {
		t.Fatalf("counter %d, want 30", n)
	}
	v.assertNoDuplicates(vcs(2)...)
}

// Scenario 12: shutdown with tasks in flight: no panic, no goroutine leak,
// everything resumes on the next start.
func TestScenario12ShutdownInFlight(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	var ok atomic.Bool
	h := fnHandler{ack: func(ctx context.Context, c *AckCall) (AckResult, error) {
		if !ok.Load() {
			return AckResult{}, errors.New("not yet")
		}
		return AckResult{}, nil
	}}
	reg := func(e *Engine) {
		e.Register("later", h, TypeOptions{})
		e.Register("sync", h, TypeOptions{AckSyncUp: true})
	}
	dir := t.TempDir()
	v := &env{t: t, dir: dir, reg: reg, queues: vcs(4)}
	if err := v.open(); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	var ids []uint64
	for i := 0; i < 20; i++ {
		typ := "later"
		if i%4 == 0 {
			typ = "sync"
		}
		r := v.submit(ctx, Request{Message: Message{Type: typ}, VChannels: vcs(4), Wait: WaitPersisted})
		ids = append(ids, r.ID)
	}
	// A waiter blocked in Submit is released by Close, with its ID.
	waitErr := make(chan error, 1)
	go func() {
		_, err := v.e.Submit(ctx, &Request{Message: Message{Type: "later"}, VChannels: vcs(1)})
		waitErr <- err
	}()
	time.Sleep(30 * time.Millisecond)
	v.close()
	if err := <-waitErr; !errors.Is(err, ErrClosed) {
		t.Fatalf("waiter after close: %v", err)
	}
	ok.Store(true)
	if err := v.open(); err != nil {
		t.Fatal(err)
	}
	for i, id := range ids {
		if i%4 == 0 {
			for _, vc := range vcs(4) {
				v.waitState(id, StatePending)
				for {
					err := v.e.Ack(ctx, id, vc)
					if err == nil {
						break
					}
					if !errors.Is(err, ErrNotAckable) {
						t.Fatal(err)
					}
					time.Sleep(time.Millisecond)
				}
			}
		}
		v.waitState(id, StateTombstone)
	}
	v.assertNoDuplicates(vcs(4)...)
	v.close()
}

// toggleSource is a HandlerSource whose types come and go (plugin reloads).
type toggleSource struct {
	mu sync.Mutex
	h  map[string]Handler
}

func (s *toggleSource) Lookup(t string) (Handler, TypeOptions, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	h, ok := s.h[t]
	return h, TypeOptions{}, ok
}

func (s *toggleSource) set(t string, h Handler) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if h == nil {
		delete(s.h, t)
	} else {
		s.h[t] = h
	}
}

// A recovered task whose plugin is gone keeps its keys, shows why it
// waits, and completes once the plugin is back.
func TestRecoveredTaskWithoutPlugin(t *testing.T) {
	src := &toggleSource{h: map[string]Handler{}}
	src.set("ext", fnHandler{ack: func(context.Context, *AckCall) (AckResult, error) { return AckResult{}, errors.New("later") }})
	v := newEnv(t, nil, func(o *Options) { o.Handlers = src }, nil)
	r := v.submit(context.Background(), Request{Message: Message{Type: "ext"}, Wait: WaitPersisted})
	src.set("ext", nil)
	v.restart()
	deadline := time.Now().Add(5 * time.Second)
	for {
		in, _ := v.e.Get(r.ID)
		if in.State == StatePending && strings.Contains(in.LastError, "no longer registered") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no visible error for the missing plugin: %+v", in)
		}
		time.Sleep(5 * time.Millisecond)
	}
	src.set("ext", Noop{})
	v.waitState(r.ID, StateTombstone)
}

// A callback whose writes cannot be committed atomically fails the task
// (permanent), instead of retrying forever.
func TestCallbackWritesTooLarge(t *testing.T) {
	big := make([]byte, 1<<20+1) // over the catalog's max_value_size
	v := newEnv(t, nil, nil, func(e *Engine) {
		e.Register("huge", fnHandler{ack: func(context.Context, *AckCall) (AckResult, error) {
			var ops []catalog.Op
			for i := 0; i < 1; i++ {
				ops = append(ops, catalog.Op{Key: []byte(fmt.Sprintf("%stest/big/%d", catalog.NSPluginKV, i)), Value: big})
			}
			return AckResult{Ops: ops}, nil
		}}, TypeOptions{})
	})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	r, err := v.e.Submit(ctx, &Request{Message: Message{Type: "huge"}})
	if err != nil || r.State != StateFailed || !strings.Contains(r.Error, "too large") {
		t.Fatalf("%+v %v", r, err)
	}
}

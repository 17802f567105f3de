package wasm

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hostd-dev/hostd/builtin/locks"
	"github.com/hostd-dev/hostd/internal/wasmtest"
	"github.com/hostd-dev/hostd/runtime/catalog"
	"github.com/hostd-dev/hostd/runtime/sched"
	"github.com/hostd-dev/hostd/sdk/abi"
)

// These tests run the leases test plugin against the real lease service
// (builtin/locks) on real Badger. serviceLocks adapts the service the way
// host/plugins.go does (test files are exempt from the layer table).

type serviceLocks struct{ s *locks.Service }

func (p serviceLocks) Acquire(ctx context.Context, r LeaseRequest) (abi.Lease, error) {
	g, err := p.s.Acquire(ctx, locks.AcquireRequest{Keys: r.Keys, TTL: r.TTL, Owner: r.Owner,
		Meta: map[string]string{"plugin": r.Plugin}, IdempotencyKey: r.IdempotencyKey, Principal: locks.PluginPrincipal(r.Plugin)})
	if err != nil {
		return abi.Lease{}, testLockErr(err)
	}
	return testLeaseOf(g), nil
}

func (p serviceLocks) Renew(ctx context.Context, plugin, id, token string, ttl time.Duration) (abi.Lease, error) {
	g, err := p.s.RenewAs(ctx, locks.PluginPrincipal(plugin), id, token, ttl)
	if err != nil {
		return abi.Lease{}, testLockErr(err)
	}
	return testLeaseOf(g), nil
}

func (p serviceLocks) Release(ctx context.Context, plugin, id, token string) error {
	return testLockErr(p.s.ReleaseAs(ctx, locks.PluginPrincipal(plugin), id, token))
}

func (p serviceLocks) CheckFence(plugin string, key abi.ResourceKey, fence uint64) error {
	return testLockErr(p.s.CheckFenceAs(locks.PluginPrincipal(plugin), key, fence))
}

func (p serviceLocks) FenceCheck(plugin string, key abi.ResourceKey, fence uint64) (catalog.Check, error) {
	c, err := p.s.FenceCheckAs(locks.PluginPrincipal(plugin), key, fence)
	return c, testLockErr(err)
}

func testLeaseOf(g *locks.Grant) abi.Lease {
	l := abi.Lease{ID: g.ID, Token: g.Token, TTLMillis: uint64(g.TTL / time.Millisecond), ExpiresAt: g.ExpiresAt.UnixNano()}
	for _, k := range g.Keys {
		l.Keys = append(l.Keys, abi.FencedKey{Key: k, Fence: g.Fence})
	}
	return l
}

func testLockErr(err error) error {
	m := map[string]error{"locked": ErrLocked, "not_holder": ErrNotHolder, "not_found": ErrNotHolder,
		"expired": ErrExpired, "invalid_key": ErrInvalidKey, "ttl_too_long": ErrInvalidLockArg, "invalid_argument": ErrInvalidLockArg, "conflict": ErrInvalidLockArg}
	if err == nil {
		return nil
	}
	if s, ok := m[locks.ErrorCode(err)]; ok {
		return errors.Join(s, err)
	}
	return err
}

type leaseEnv struct {
	rt    *Runtime
	store catalog.Store
	svc   *locks.Service
	clock *sched.FakeClock
}

func newLeaseEnv(t *testing.T) *leaseEnv {
	t.Helper()
	store := openStore(t)
	clock := sched.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	svc, err := locks.Open(bg, locks.Options{Store: store, Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { svc.Close() })
	rt := mustRuntime(t, Config{Plugins: []Spec{{Name: "leases", Path: wasmtest.Build(t, "testdata/leases")}},
		Store: store, Locks: serviceLocks{svc}, Defaults: Limits{PoolSize: 1}})
	return &leaseEnv{rt: rt, store: store, svc: svc, clock: clock}
}

func leaseMsg(t *testing.T, fields map[string]any) *abi.Message {
	b, err := json.Marshal(fields)
	if err != nil {
		t.Fatal(err)
	}
	return &abi.Message{ID: 1, Type: "Lease", Payload: b, Attempt: 1}
}

var jobX = abi.ResourceKey{Domain: "job", Key: "x", Mode: abi.Exclusive}

// pluginKV reads the leases plugin's committed key.
func (e *leaseEnv) pluginKV(t *testing.T, key string) ([]byte, bool) {
	t.Helper()
	v, _, err := e.rt.KVGet(bg, "leases", []byte(key))
	if errors.Is(err, catalog.ErrNotFound) {
		return nil, false
	}
	if err != nil {
		t.Fatal(err)
	}
	return v, true
}

// fencedAck runs the "fenced" callback and returns its result and fence.
func (e *leaseEnv) fencedAck(t *testing.T, ttl time.Duration) (*AckResult, uint64) {
	t.Helper()
	res, err := e.rt.Ack(bg, leaseMsg(t, map[string]any{"op": "fenced", "lock": "x", "key": "k", "value": "v1", "ttl_ms": ttl.Milliseconds()}))
	if err != nil {
		t.Fatal(err)
	}
	var fence uint64
	for _, op := range res.Ops {
		if strings.HasSuffix(string(op.Key), "/lease/x") {
			var rec struct{ Fence uint64 }
			if err := json.Unmarshal(op.Value, &rec); err != nil {
				t.Fatal(err)
			}
			fence = rec.Fence
		}
	}
	if fence == 0 || len(res.Ops) != 3 { // two puts and the usage record
		t.Fatalf("fenced ack staged %d ops, fence %d", len(res.Ops), fence)
	}
	// The fence's check is among the Checks: the grant record.
	check, err := e.svc.FenceCheck(jobX, fence)
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, c := range res.Checks {
		if string(c.Key) == string(check.Key) && c.Version == check.Version {
			found = true
		}
	}
	if !found {
		t.Fatalf("fence check %q not in the staged Checks %v", check.Key, res.Checks)
	}
	return res, fence
}

func TestFencedPutCommitsWithCurrentFence(t *testing.T) {
	e := newLeaseEnv(t)
	res, fence := e.fencedAck(t, time.Minute)
	if err := commit(bg, e.store, res); err != nil {
		t.Fatalf("commit with the current fence: %v", err)
	}
	if v, ok := e.pluginKV(t, "k"); !ok || string(v) != "v1" {
		t.Fatalf("k = %q %v", v, ok)
	}
	// The plugin's lease is an ordinary grant, owned by the plugin.
	kv, err := e.svc.Inspect(jobX)
	if err != nil || len(kv.Holders) != 1 || kv.Holders[0].Owner != "leases" || kv.Holders[0].Fence != fence || kv.Holders[0].Meta["plugin"] != "leases" {
		t.Fatalf("inspect: %+v %v", kv, err)
	}
}

func TestFencedPutStaleAfterForceRelease(t *testing.T) {
	e := newLeaseEnv(t)
	res, fence := e.fencedAck(t, time.Minute)
	if _, err := e.svc.ForceRelease(bg, jobX, "", "test eviction", "tester"); err != nil {
		t.Fatal(err)
	}
	g, err := e.svc.Acquire(bg, locks.AcquireRequest{Keys: []abi.ResourceKey{jobX}, Owner: "other"})
	if err != nil || g.Fence <= fence {
		t.Fatalf("re-acquire: %+v %v (stale fence %d)", g, err, fence)
	}
	if err := commit(bg, e.store, res); !isConflict(err) {
		t.Fatalf("commit with the stale fence: %v, want a conflict", err)
	}
	for _, k := range []string{"k", "lease/x"} {
		if _, ok := e.pluginKV(t, k); ok {
			t.Fatalf("%s was written by a batch with a stale fence", k)
		}
	}
	// A new attempt staging with the stale fence fails at once.
	_, err = e.rt.Ack(bg, leaseMsg(t, map[string]any{"op": "put-with-fence", "lock": "x", "key": "k", "value": "v2", "fence": fence}))
	if KindOf(err) != KindRetryable || !strings.Contains(err.Error(), "[not_holder]") {
		t.Fatalf("stale fenced put: %v", err)
	}
	// The new holder's fence is current, but not the plugin's: unusable.
	_, err = e.rt.Ack(bg, leaseMsg(t, map[string]any{"op": "put-with-fence", "lock": "x", "key": "k", "value": "v3", "fence": g.Fence}))
	if KindOf(err) != KindRetryable || !strings.Contains(err.Error(), "[not_holder]") {
		t.Fatalf("fenced put with another principal's current fence: %v", err)
	}
	// Once it is released, the plugin's own new lease writes.
	if err := e.svc.Release(bg, g.ID, g.Token); err != nil {
		t.Fatal(err)
	}
	res, _ = e.fencedAck(t, time.Minute)
	if err := commit(bg, e.store, res); err != nil {
		t.Fatal(err)
	}
	if v, _ := e.pluginKV(t, "k"); string(v) != "v1" {
		t.Fatalf("k = %q", v)
	}
}

func TestFencedPutStaleAfterExpiry(t *testing.T) {
	e := newLeaseEnv(t)
	res, fence := e.fencedAck(t, time.Second)
	e.clock.Advance(2 * time.Second)
	// Once the expiry has deleted the grant, someone else gets the key.
	var g *locks.Grant
	deadline := time.Now().Add(5 * time.Second)
	for {
		var err error
		g, err = e.svc.Acquire(bg, locks.AcquireRequest{Keys: []abi.ResourceKey{jobX}, Owner: "other"})
		if err == nil {
			break
		}
		if !errors.Is(err, locks.ErrLocked) || time.Now().After(deadline) {
			t.Fatalf("acquire after expiry: %v", err)
		}
		time.Sleep(5 * time.Millisecond)
	}
	if g.Fence <= fence {
		t.Fatalf("new fence %d <= expired fence %d", g.Fence, fence)
	}
	if err := commit(bg, e.store, res); !isConflict(err) {
		t.Fatalf("commit after the lease expired: %v, want a conflict", err)
	}
	if _, ok := e.pluginKV(t, "k"); ok {
		t.Fatal("k written with an expired fence")
	}
}

func TestLeaseHostFunctions(t *testing.T) {
	e := newLeaseEnv(t)
	// acquire, check, renew, wrong-token release, release, release again,
	// check the released fence: all asserted inside the guest.
	if _, err := e.rt.Ack(bg, leaseMsg(t, map[string]any{"op": "cycle", "lock": "c"})); err != nil {
		t.Fatal(err)
	}
	if kv, _ := e.svc.Inspect(abi.ResourceKey{Domain: "job", Key: "c"}); len(kv.Holders) != 0 {
		t.Fatalf("released lease still held: %+v", kv)
	}

	held, err := e.svc.Acquire(bg, locks.AcquireRequest{Keys: []abi.ResourceKey{{Domain: "job", Key: "busy", Mode: abi.Exclusive}},
		Owner: "operator", Meta: map[string]string{"why": "maintenance"}})
	if err != nil {
		t.Fatal(err)
	}
	_, err = e.rt.Ack(bg, leaseMsg(t, map[string]any{"op": "acquire", "lock": "busy", "ttl_ms": 1000}))
	if KindOf(err) != KindRetryable || !strings.Contains(err.Error(), "[locked]") || !strings.Contains(err.Error(), "operator") {
		t.Fatalf("acquire of a held key: %v", err)
	}
	_, err = e.rt.Ack(bg, leaseMsg(t, map[string]any{"op": "acquire", "lock": "big", "ttl_ms": time.Hour.Milliseconds()}))
	if !strings.Contains(err.Error(), "[invalid]") {
		t.Fatalf("ttl over the maximum: %v", err)
	}
	_, err = e.rt.Ack(bg, leaseMsg(t, map[string]any{"op": "bad-key"}))
	if !strings.Contains(err.Error(), "[invalid_key]") {
		t.Fatalf("bad key: %v", err)
	}

	// Validators are read-only: fences may be checked, leases not taken.
	// Only the plugin's own fences pass: the operator's is not its own.
	err = e.rt.Validate(bg, leaseMsg(t, map[string]any{"op": "check", "lock": "busy", "fence": held.Fence}), nil)
	if err == nil || !strings.Contains(err.Error(), "[not_holder]") {
		t.Fatalf("validator check of the operator's live fence: %v", err)
	}
	_, own := e.fencedAck(t, time.Minute)
	if err := e.rt.Validate(bg, leaseMsg(t, map[string]any{"op": "check", "lock": "x", "fence": own}), nil); err != nil {
		t.Fatalf("validator check of the plugin's live fence: %v", err)
	}
	err = e.rt.Validate(bg, leaseMsg(t, map[string]any{"op": "check", "lock": "x", "fence": own - 1}), nil)
	if err == nil || !strings.Contains(err.Error(), "[not_holder]") {
		t.Fatalf("validator check of a wrong fence: %v", err)
	}
	err = e.rt.Validate(bg, leaseMsg(t, map[string]any{"op": "acquire", "lock": "v"}), nil)
	if err == nil || !strings.Contains(err.Error(), "[read_only]") {
		t.Fatalf("validator acquire: %v", err)
	}
	if list := e.svc.List(0, 100); len(list) != 2 {
		t.Fatalf("grants after the validator: %+v", list)
	}
}

// A runtime without lease locks still loads plugins that import the lock
// functions (and ones that do not); the calls fail as unavailable.
func TestLeaseFunctionsWithoutLocks(t *testing.T) {
	rt := mustRuntime(t, Config{Plugins: []Spec{{Name: "leases", Path: wasmtest.Build(t, "testdata/leases")},
		{Name: "echo", Path: echoWasm(t)}}, Store: openStore(t), Defaults: Limits{PoolSize: 1}})
	_, err := rt.Ack(bg, leaseMsg(t, map[string]any{"op": "acquire", "lock": "x", "ttl_ms": 1000}))
	if err == nil || !strings.Contains(err.Error(), "not configured") {
		t.Fatalf("acquire without locks: %v", err)
	}
	if _, err := rt.Ack(bg, msg("Echo", "ok")); err != nil {
		t.Fatal(err)
	}
}

// Fenced puts racing operators' force-releases (under -race): a commit
// that starts after the fence was evicted never succeeds, and the KV holds
// exactly the last successful commit's value.
func TestFencedPutHammer(t *testing.T) {
	e := newLeaseEnv(t)
	e.rt.Close()
	e.rt = mustRuntime(t, Config{Plugins: []Spec{{Name: "leases", Path: wasmtest.Build(t, "testdata/leases")}},
		Store: e.store, Locks: serviceLocks{e.svc}, Defaults: Limits{PoolSize: 2}})
	const workers, iters = 2, 40
	var evicted sync.Map // fence -> true once ForceRelease returned
	stop := make(chan struct{})
	evictorDone := make(chan struct{})
	go func() {
		defer close(evictorDone)
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			key := abi.ResourceKey{Domain: "job", Key: fmt.Sprintf("h%d", i%workers)}
			view, err := e.svc.Inspect(key)
			if err != nil || len(view.Holders) == 0 {
				time.Sleep(100 * time.Microsecond)
				continue
			}
			hv := view.Holders[0]
			if _, err := e.svc.ForceRelease(bg, key, hv.GrantID, "hammer", "tester"); err == nil {
				evicted.Store(hv.Fence, true)
			}
		}
	}()
	var wg sync.WaitGroup
	var commits, conflicts atomic.Int64
	errs := make(chan error, workers)
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			lock := fmt.Sprintf("h%d", w)
			key := abi.ResourceKey{Domain: "job", Key: lock}
			last := ""
			for i := 0; i < iters; i++ {
				val := fmt.Sprintf("v%d", i)
				b, _ := json.Marshal(map[string]any{"op": "fenced", "lock": lock, "key": "k" + lock, "value": val, "ttl_ms": 60000})
				res, err := e.rt.Ack(bg, &abi.Message{ID: 1, Type: "Lease", Payload: b, Attempt: 1})
				if err != nil {
					if strings.Contains(err.Error(), "[not_holder]") {
						continue // evicted between acquire and the fenced put
					}
					errs <- err
					return
				}
				var fence uint64
				for _, op := range res.Ops {
					if strings.HasSuffix(string(op.Key), "/lease/"+lock) {
						var rec struct{ Fence uint64 }
						_ = json.Unmarshal(op.Value, &rec)
						fence = rec.Fence
					}
				}
				_, evictedBefore := evicted.Load(fence)
				err = commit(bg, e.store, res)
				switch {
				case err == nil && evictedBefore:
					errs <- fmt.Errorf("commit with fence %d succeeded after its eviction", fence)
					return
				case err == nil:
					last = val
					commits.Add(1)
				case isConflict(err):
					conflicts.Add(1)
				default:
					errs <- err
					return
				}
				// Free the key for the next iteration (the evictor may have).
				_, _ = e.svc.ForceRelease(bg, key, "", "next", "worker")
			}
			v, _, err := e.rt.KVGet(bg, "leases", []byte("k"+lock))
			if last != "" && (err != nil || string(v) != last) {
				errs <- fmt.Errorf("k%s = %q (%v), want the last committed %q", lock, v, err, last)
			}
		}()
	}
	wg.Wait()
	close(stop)
	<-evictorDone
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	t.Logf("%d commits, %d conflicts (fence evicted before the commit)", commits.Load(), conflicts.Load())
	if commits.Load() == 0 {
		t.Error("no fenced commit succeeded")
	}
}

// stagedJSON decodes the value the callback staged under key suffix.
func stagedJSON(t *testing.T, res *AckResult, suffix string, v any) bool {
	t.Helper()
	for _, op := range res.Ops {
		if strings.HasSuffix(string(op.Key), suffix) {
			if err := json.Unmarshal(op.Value, v); err != nil {
				t.Fatal(err)
			}
			return true
		}
	}
	return false
}

// Issue 12, escape 1, with the real Wasm runtime and two plugins
// ("leases" and the hostile "thief", testdata/thief): the thief repeats the
// victim's keys, owner label and idempotency key, and an operator's, and
// gets no grant; handed the victim's id, token and fence it can renew,
// release, check and fence-write nothing; the victim keeps its grant.
func TestPluginCannotStealLeases(t *testing.T) {
	e := newLeaseEnv(t)
	e.rt.Close()
	e.rt = mustRuntime(t, Config{Plugins: []Spec{{Name: "leases", Path: wasmtest.Build(t, "testdata/leases")},
		{Name: "thief", Path: wasmtest.Build(t, "testdata/thief")}},
		Store: e.store, Locks: serviceLocks{e.svc}, Defaults: Limits{PoolSize: 1}})
	ack := func(plugin string, fields map[string]any) (*AckResult, error) {
		m := leaseMsg(t, fields)
		if plugin == "thief" {
			m.Type = "Thief"
		}
		return e.rt.Ack(bg, m)
	}
	steal := map[string]any{"op": "acquire-with", "lock": "v", "owner": "worker", "idem": "advance-1", "ttl_ms": 60000}
	res, err := ack("leases", steal)
	if err != nil {
		t.Fatal(err)
	}
	var got struct {
		ID    string
		Token string
		Fence uint64
	}
	if !stagedJSON(t, res, "/got/v", &got) || got.Token == "" {
		t.Fatalf("victim's acquire staged %+v", res.Ops)
	}
	view, _ := e.svc.Inspect(abi.ResourceKey{Domain: "job", Key: "v"})
	if len(view.Holders) != 1 || view.Holders[0].Owner != "leases/worker" {
		t.Fatalf("owner is not set by the host: %+v", view)
	}
	// The victim's own retry gets its grant back.
	res, err = ack("leases", steal)
	var again struct{ ID, Token string }
	if err != nil || !stagedJSON(t, res, "/got/v", &again) || again.ID != got.ID || again.Token != got.Token {
		t.Fatalf("victim's retry: %+v %v", again, err)
	}
	// The victim reusing its key for another request: invalid, nothing
	// acquired (issue 11's fingerprint).
	res, err = ack("leases", map[string]any{"op": "acquire-with", "lock": "w", "owner": "worker", "idem": "advance-1", "ttl_ms": 60000})
	if !strings.Contains(fmt.Sprint(err), "[invalid]") || !strings.Contains(fmt.Sprint(err), got.ID) {
		t.Fatalf("idempotency key reused for another lock: %v %+v", err, res)
	}
	// The thief, same request: locked, nothing staged.
	res, err = ack("thief", steal)
	if !strings.Contains(fmt.Sprint(err), "[locked]") || res != nil && len(res.Ops) != 0 {
		t.Fatalf("thief's acquire: %v %+v", err, res)
	}
	if strings.Contains(fmt.Sprint(err), got.Token) {
		t.Fatalf("the thief saw the token: %v", err)
	}
	// The thief with the victim's id, token and fence: nothing works.
	res, err = ack("thief", map[string]any{"op": "use", "lock": "v", "id": got.ID, "token": got.Token, "fence": got.Fence})
	if err != nil {
		t.Fatal(err)
	}
	var use map[string]string
	stagedJSON(t, res, "/use/v", &use)
	for _, op := range []string{"renew", "check", "fenced_put", "release"} {
		if use[op] != "not_holder" {
			t.Errorf("thief's %s of the victim's grant: %q, want not_holder", op, use[op])
		}
	}
	view, _ = e.svc.Inspect(abi.ResourceKey{Domain: "job", Key: "v"})
	if len(view.Holders) != 1 || view.Holders[0].Fence != got.Fence {
		t.Fatalf("victim lost its grant: %+v", view)
	}
	// The victim itself can use it (same module, its own principal).
	res, err = ack("leases", map[string]any{"op": "use", "lock": "v", "id": got.ID, "token": got.Token, "fence": got.Fence})
	if err != nil {
		t.Fatal(err)
	}
	use = nil
	stagedJSON(t, res, "/use/v", &use)
	for _, op := range []string{"renew", "check", "fenced_put", "release"} {
		if use[op] != "ok" {
			t.Errorf("owner's %s of its grant: %q, want ok", op, use[op])
		}
	}

	// An operator's grant: a plugin naming the operator's owner and
	// idempotency key gets nothing of it.
	op, err := e.svc.Acquire(bg, locks.AcquireRequest{Keys: []abi.ResourceKey{{Domain: "job", Key: "op", Mode: abi.Exclusive}},
		Owner: "operator", IdempotencyKey: "k", TTL: time.Minute, Principal: locks.TokenPrincipal("ops")})
	if err != nil {
		t.Fatal(err)
	}
	res, err = ack("thief", map[string]any{"op": "acquire-with", "lock": "op", "owner": "operator", "idem": "k", "ttl_ms": 60000})
	if !strings.Contains(fmt.Sprint(err), "[locked]") || res != nil && len(res.Ops) != 0 {
		t.Fatalf("plugin acquiring as the operator: %v %+v", err, res)
	}
	res, err = ack("thief", map[string]any{"op": "use", "lock": "op", "id": op.ID, "token": op.Token, "fence": op.Fence})
	if err != nil {
		t.Fatal(err)
	}
	use = nil
	stagedJSON(t, res, "/use/op", &use)
	for _, o := range []string{"renew", "check", "fenced_put", "release"} {
		if use[o] != "not_holder" {
			t.Errorf("plugin's %s of the operator's grant: %q, want not_holder", o, use[o])
		}
	}
	if v, err := e.svc.Get(op.ID); err != nil || v.TTL != time.Minute {
		t.Fatalf("operator's grant changed: %+v %v", v, err)
	}
}

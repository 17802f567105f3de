package host

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/hostd-dev/hostd/builtin/locks"
	"github.com/hostd-dev/hostd/client"
	"github.com/hostd-dev/hostd/host/api"
	"github.com/hostd-dev/hostd/host/config"
	"github.com/hostd-dev/hostd/internal/wasmtest"
	"github.com/hostd-dev/hostd/sdk/abi"
)

// Fenced writes into a plugin's KV over HTTP (PUT/DELETE
// /v1/plugins/{name}/kv/{key}): a current fence writes; a released,
// force-released or expired grant's fence gets 409 not_holder and nothing
// is written; a newer grant writes again.
func TestPluginKVFencedWritesOverHTTP(t *testing.T) {
	h := startHost(t, jobsConfig(t))
	c, err := client.New(h.URL())
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	acquire := func(ttl string) *client.LockGrant {
		t.Helper()
		g, err := c.AcquireLock(ctx, client.AcquireLock{Keys: []client.LockKey{{Domain: "job", Key: "r0"}}, TTL: ttl, Wait: "10s", Owner: "t"})
		if err != nil {
			t.Fatal(err)
		}
		return g
	}
	fenceOf := func(g *client.LockGrant) *client.KVFence {
		return &client.KVFence{Domain: "job", Key: "r0", Fence: g.Fence}
	}
	value := func() string {
		t.Helper()
		kv, err := c.GetPluginKV(ctx, "jobs", "owner/r0")
		if client.IsNotFound(err) {
			return "<absent>"
		}
		if err != nil || kv.ValueText == nil {
			t.Fatalf("get: %+v %v", kv, err)
		}
		return *kv.ValueText
	}
	stale := func(what string, err error) {
		t.Helper()
		var ce *client.Error
		if !errors.As(err, &ce) || ce.Code != "not_holder" || ce.Status != 409 {
			t.Fatalf("%s: %v, want 409 not_holder", what, err)
		}
	}

	g1 := acquire("1m")
	kv, err := c.PutPluginKV(ctx, "jobs", "owner/r0", []byte("g1"), fenceOf(g1))
	if err != nil || kv.Version == 0 || kv.Key != "owner/r0" {
		t.Fatalf("fenced put: %+v %v", kv, err)
	}
	if v := value(); v != "g1" {
		t.Fatalf("value %q, want g1", v)
	}

	// Released: the old fence writes nothing, put or delete.
	if err := c.ReleaseLock(ctx, g1.ID, g1.Token); err != nil {
		t.Fatal(err)
	}
	_, err = c.PutPluginKV(ctx, "jobs", "owner/r0", []byte("stale"), fenceOf(g1))
	stale("put after release", err)
	stale("delete after release", c.DeletePluginKV(ctx, "jobs", "owner/r0", fenceOf(g1)))
	if v := value(); v != "g1" {
		t.Fatalf("value %q after stale writes, want g1", v)
	}

	// Force-released: the evicted holder is refused, the next holder writes.
	g2 := acquire("1m")
	if _, err := c.ForceReleaseLock(ctx, "job", "r0", "", "test eviction"); err != nil {
		t.Fatal(err)
	}
	_, err = c.PutPluginKV(ctx, "jobs", "owner/r0", []byte("evicted"), fenceOf(g2))
	stale("put after force-release", err)
	g3 := acquire("1m")
	if g3.Fence <= g2.Fence {
		t.Fatalf("fence %d after %d", g3.Fence, g2.Fence)
	}
	if _, err := c.PutPluginKV(ctx, "jobs", "owner/r0", []byte("g3"), fenceOf(g3)); err != nil {
		t.Fatal(err)
	}
	if err := c.DeletePluginKV(ctx, "jobs", "owner/r0", fenceOf(g3)); err != nil {
		t.Fatal(err)
	}
	if v := value(); v != "<absent>" {
		t.Fatalf("value %q after the fenced delete", v)
	}
	if err := c.ReleaseLock(ctx, g3.ID, g3.Token); err != nil {
		t.Fatal(err)
	}

	// Expired: once the TTL has passed, the fence writes nothing.
	g4 := acquire("1s")
	deadline := time.Now().Add(30 * time.Second)
	for {
		_, err := c.PutPluginKV(ctx, "jobs", "owner/r0", []byte("g4"), fenceOf(g4))
		if err != nil {
			stale("put after expiry", err)
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("a 1s grant's fence still writes after 30s")
		}
		time.Sleep(50 * time.Millisecond)
	}
	if !time.Now().After(g4.ExpiresAt) {
		t.Fatalf("refused before the grant expired (%v)", g4.ExpiresAt)
	}

	// Bad requests.
	for name, tc := range map[string]struct {
		plugin, key string
		fence       *client.KVFence
		code        string
	}{
		"bad plugin name": {"no such/..", "k", nil, "invalid_argument"},
		"zero fence":      {"jobs", "k", &client.KVFence{Domain: "job", Key: "r0"}, "invalid_argument"},
		"no fence domain": {"jobs", "k", &client.KVFence{Key: "r0", Fence: 1}, "invalid_argument"},
	} {
		_, err := c.PutPluginKV(ctx, tc.plugin, tc.key, []byte("x"), tc.fence)
		if !client.HasCode(err, tc.code) {
			t.Errorf("%s: %v, want %s", name, err, tc.code)
		}
	}
	big := make([]byte, abi.MaxValueLen+1)
	if _, err := c.PutPluginKV(ctx, "jobs", "k", big, nil); !client.HasCode(err, api.CodeTooLarge) {
		t.Errorf("oversized value: %v", err)
	}
}

// An unfenced write overrides a plugin's state: admin only. A fenced one
// needs write (like taking the lease); read may not write at all.
func TestPluginKVWriteRoles(t *testing.T) {
	cfg := jobsConfig(t)
	cfg.API.Tokens = []config.Token{
		{Name: "r", Token: "read-secret-0123456789", Role: "read"},
		{Name: "w", Token: "write-secret-0123456789", Role: "write"},
		{Name: "a", Token: "admin-secret-0123456789", Role: "admin"},
	}
	h := startHost(t, cfg)
	as := func(secret string) *client.Client {
		c, err := client.New(h.URL(), client.WithToken(secret))
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	r, w, a := as("read-secret-0123456789"), as("write-secret-0123456789"), as("admin-secret-0123456789")
	ctx := context.Background()
	g, err := w.AcquireLock(ctx, client.AcquireLock{Keys: []client.LockKey{{Domain: "job", Key: "r0"}}, TTL: "1m", Owner: "t"})
	if err != nil {
		t.Fatal(err)
	}
	fence := &client.KVFence{Domain: "job", Key: "r0", Fence: g.Fence}
	if _, err := w.PutPluginKV(ctx, "jobs", "k", []byte("v"), nil); !client.HasCode(err, api.CodePermissionDenied) {
		t.Fatalf("unfenced put with a write token: %v", err)
	}
	if err := w.DeletePluginKV(ctx, "jobs", "k", nil); !client.HasCode(err, api.CodePermissionDenied) {
		t.Fatalf("unfenced delete with a write token: %v", err)
	}
	if _, err := r.PutPluginKV(ctx, "jobs", "k", []byte("v"), fence); !client.HasCode(err, api.CodePermissionDenied) {
		t.Fatalf("fenced put with a read token: %v", err)
	}
	if _, err := w.PutPluginKV(ctx, "jobs", "k", []byte("fenced"), fence); err != nil {
		t.Fatalf("fenced put with a write token: %v", err)
	}
	if _, err := a.PutPluginKV(ctx, "jobs", "k", []byte("override"), nil); err != nil {
		t.Fatalf("unfenced put with an admin token: %v", err)
	}
	if kv, err := r.GetPluginKV(ctx, "jobs", "k"); err != nil || string(kv.Value) != "override" {
		t.Fatalf("get: %+v %v", kv, err)
	}
}

// The fence is re-checked in the committing catalog transaction: a grant
// evicted between the fence check and the commit makes the write fail
// with not_holder and write nothing; a grant renewed in that window is
// still current and the write commits.
func TestPluginKVFenceRecheckedAtCommit(t *testing.T) {
	h := startHost(t, jobsConfig(t))
	ctx := context.Background()
	key := abi.ResourceKey{Domain: "job", Key: "r0"}
	acquire := func() *locks.Grant {
		g, err := h.leases.Acquire(ctx, locks.AcquireRequest{Keys: []abi.ResourceKey{key}, TTL: time.Minute, Owner: "t", Principal: "token:ops"})
		if err != nil {
			t.Fatal(err)
		}
		return g
	}
	get := func() (string, bool) {
		v, _, err := h.plugins.KVGet(ctx, "jobs", []byte("k"))
		return string(v), err == nil
	}

	g := acquire()
	hits := 0
	w := &pluginKVWriter{rt: h.plugins, leases: h.leases, log: quietLogger(), beforeCommit: func() {
		if hits++; hits == 1 {
			if _, err := h.leases.ForceRelease(ctx, key, g.ID, "evict in the window", "test"); err != nil {
				t.Error(err)
			}
		}
	}}
	_, err := w.KVWrite(ctx, api.KVWrite{Plugin: "jobs", Principal: "token:ops", Key: []byte("k"), Value: []byte("late"), Fence: &abi.FencedKey{Key: key, Fence: g.Fence}})
	if locks.ErrorCode(err) != "not_holder" {
		t.Fatalf("write evicted before its commit: %v, want not_holder", err)
	}
	if v, ok := get(); ok {
		t.Fatalf("the evicted write committed: %q", v)
	}

	g = acquire()
	hits = 0
	w.beforeCommit = func() {
		if hits++; hits == 1 {
			if _, err := h.leases.Renew(ctx, g.ID, g.Token, time.Minute); err != nil {
				t.Error(err)
			}
		}
	}
	if _, err := w.KVWrite(ctx, api.KVWrite{Plugin: "jobs", Principal: "token:ops", Key: []byte("k"), Value: []byte("renewed"), Fence: &abi.FencedKey{Key: key, Fence: g.Fence}}); err != nil {
		t.Fatalf("write whose grant was renewed before its commit: %v", err)
	}
	if v, _ := get(); v != "renewed" {
		t.Fatalf("value %q after %d attempts", v, hits)
	}
}

// jobsConfig is testConfig with a plugin named "jobs" (the echo test
// plugin): KV writes through the API need a plugin that exists.
func jobsConfig(t *testing.T) *config.Config {
	cfg := testConfig(t)
	cfg.Plugins.List = []config.Plugin{{Name: "jobs", Path: wasmtest.Build(t, "../runtime/wasm/testdata/echo")}}
	return cfg
}

// With auth off (every caller is admin), a KV write for a plugin that
// neither exists nor has KV is 404 and creates nothing, fenced or not
// (issue 11: it used to create an orphan namespace). A configured plugin's
// namespace takes writes, and they keep its usage record exact.
func TestPluginKVWriteUnknownPluginIs404(t *testing.T) {
	h := startHost(t, jobsConfig(t))
	c, err := client.New(h.URL())
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	g, err := c.AcquireLock(ctx, client.AcquireLock{Keys: []client.LockKey{{Domain: "job", Key: "r0"}}, TTL: "1m", Owner: "t"})
	if err != nil {
		t.Fatal(err)
	}
	for name, fence := range map[string]*client.KVFence{"unfenced": nil, "fenced": {Domain: "job", Key: "r0", Fence: g.Fence}} {
		if _, err := c.PutPluginKV(ctx, "nosuch", "k", []byte("v"), fence); !client.IsNotFound(err) {
			t.Fatalf("%s put into a plugin that does not exist: %v, want 404", name, err)
		}
		if err := c.DeletePluginKV(ctx, "nosuch", "k", fence); !client.IsNotFound(err) {
			t.Fatalf("%s delete in a plugin that does not exist: %v, want 404", name, err)
		}
	}
	if entries, _, err := h.plugins.KVScan(ctx, "nosuch", nil, nil, 10); err != nil || len(entries) != 0 {
		t.Fatalf("orphan namespace: %v %v", entries, err)
	}
	for _, k := range []string{"a", "b"} {
		if _, err := c.PutPluginKV(ctx, "jobs", k, []byte("12345"), nil); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.DeletePluginKV(ctx, "jobs", "a", nil); err != nil {
		t.Fatal(err)
	}
	keys, size, err := h.plugins.KVUsage(ctx, "jobs")
	if err != nil || keys != 1 || size != int64(len("pkv/jobs/b")+5) {
		t.Fatalf("usage after API writes: %d keys, %d bytes, %v", keys, size, err)
	}
}

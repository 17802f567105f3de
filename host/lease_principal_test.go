package host

import (
	"context"
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hostd-dev/hostd/builtin/locks"
	"github.com/hostd-dev/hostd/client"
	"github.com/hostd-dev/hostd/host/config"
	"github.com/hostd-dev/hostd/runtime/wasm"
)

// Issue 12, escape 1, over HTTP with two tokens: the thief's acquire that
// repeats the victim's keys, owner and idempotency key gets no grant and
// no token (409 locked), and the victim's fence does not fence the
// thief's plugin KV writes; the victim's own retry gets its grant back.
// Issue 11: the same idempotency key with a different request is 409
// conflict naming the original grant.
func TestLeaseTheftOverHTTP(t *testing.T) {
	cfg := jobsConfig(t) // a real plugin "jobs": KV writes to unknown plugins are 404
	cfg.API.Tokens = []config.Token{
		{Name: "ops", Token: "ops-secret-0123456789", Role: "write"},
		{Name: "thief", Token: "thief-secret-0123456789", Role: "write"},
	}
	h := startHost(t, cfg)
	as := func(secret string) *client.Client {
		c, err := client.New(h.URL(), client.WithToken(secret))
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	victim, thief := as("ops-secret-0123456789"), as("thief-secret-0123456789")
	ctx := context.Background()
	req := client.AcquireLock{Keys: []client.LockKey{{Domain: "job", Key: "x"}}, TTL: "1m", Owner: "operator", IdempotencyKey: "advance-1"}
	g, err := victim.AcquireLock(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	stolen, err := thief.AcquireLock(ctx, req)
	if stolen != nil {
		t.Fatalf("the thief got the victim's grant: %+v", stolen)
	}
	ce := wantAPICode(t, err, "locked")
	raw, _ := json.Marshal(ce)
	if strings.Contains(string(raw), g.Token) {
		t.Fatalf("the conflict shows the token: %s", raw)
	}
	// A fence is not a secret: the thief knows it, but it fences only
	// writes of the principal that took the grant.
	fence := &client.KVFence{Domain: "job", Key: "x", Fence: g.Fence}
	_, err = thief.PutPluginKV(ctx, "jobs", "k", []byte("thief"), fence)
	wantAPICode(t, err, "not_holder")
	if _, err := victim.PutPluginKV(ctx, "jobs", "k", []byte("victim"), fence); err != nil {
		t.Fatalf("the holder's fenced write: %v", err)
	}
	if kv, _, err := h.plugins.KVGet(ctx, "jobs", []byte("k")); err != nil || string(kv) != "victim" {
		t.Fatalf("plugin KV %q %v", kv, err)
	}
	// The victim's own retry: the same grant, token included.
	again, err := victim.AcquireLock(ctx, req)
	if err != nil || !again.Duplicate || again.ID != g.ID || again.Token != g.Token {
		t.Fatalf("victim's retry: %+v %v", again, err)
	}
	// Same idempotency key, different request: 409 conflict with the
	// original grant's id; nothing acquired.
	other := req
	other.TTL = "2m"
	_, err = victim.AcquireLock(ctx, other)
	ce = wantAPICode(t, err, "conflict")
	if ce.Status != 409 || ce.Details["original_id"] != g.ID {
		t.Fatalf("conflict %+v", ce)
	}
	if l, err := victim.ListLocks(ctx, client.Page{}); err != nil || len(l.Items) != 1 {
		t.Fatalf("grants after the attempts: %+v %v", l, err)
	}
}

// Issue 11: one TTL rule for acquire, renew and presence over HTTP: ""
// and 0 mean the default (renew: the grant's TTL); otherwise 1ms..max_ttl,
// else 400 naming the field ttl.
func TestTTLRuleOverHTTP(t *testing.T) {
	cfg := testConfig(t)
	cfg.Locks.DefaultTTL, cfg.Locks.MaxTTL = 30*time.Second, 10*time.Minute
	h := startHost(t, cfg)
	c, err := client.New(h.URL())
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for i, tc := range []struct {
		ttl, want, code string // want: granted TTL; code: error
	}{
		{"", "30s", ""},
		{"0s", "30s", ""},
		{"1ns", "", "invalid_argument"},
		{"999us", "", "invalid_argument"},
		{"-1s", "", "invalid_argument"},
		{"soon", "", "invalid_argument"},
		{"1ms", "1ms", ""},
		{"10m", "10m0s", ""},
		{"10m0.000000001s", "", "ttl_too_long"},
	} {
		check := func(op string, got string, err error, want string) {
			t.Helper()
			if tc.code != "" {
				var ce *client.Error
				if !client.HasCode(err, tc.code) || !asErr(err, &ce) || ce.Status != 400 || ce.Details["field"] != "ttl" {
					t.Errorf("%s ttl %q: %v, want 400 %s naming the field ttl", op, tc.ttl, err, tc.code)
				}
				return
			}
			if err != nil || got != want {
				t.Errorf("%s ttl %q: %q %v, want %q", op, tc.ttl, got, err, want)
			}
		}
		g, err := c.AcquireLock(ctx, client.AcquireLock{Keys: []client.LockKey{{Domain: "ttl", Key: strconv.Itoa(i)}}, TTL: tc.ttl, Owner: "o"})
		got := ""
		if g != nil {
			got = g.TTL
		}
		check("acquire", got, err, tc.want)
		wantRenew := tc.want
		if tc.ttl == "" || tc.ttl == "0s" {
			wantRenew = "20s"
		}
		held, err := c.AcquireLock(ctx, client.AcquireLock{Keys: []client.LockKey{{Domain: "held", Key: strconv.Itoa(i)}}, TTL: "20s", Owner: "o"})
		if err != nil {
			t.Fatal(err)
		}
		r, err := c.RenewLock(ctx, held.ID, held.Token, tc.ttl)
		got = ""
		if r != nil {
			got = r.TTL
		}
		check("renew", got, err, wantRenew)
		start := time.Now()
		e, err := c.Announce(ctx, "ttl", "h"+strconv.Itoa(i), nil, tc.ttl, "")
		got = ""
		if e != nil {
			// The entry's expiry, rounded to the TTL's unit.
			d := e.ExpiresAt.Sub(start)
			switch {
			case d > 9*time.Minute:
				got = "10m0s"
			case d > 25*time.Second:
				got = "30s"
			case d < time.Second:
				got = "1ms"
			}
		}
		check("announce", got, err, tc.want)
	}
}

func asErr(err error, target **client.Error) bool {
	ce, ok := err.(*client.Error)
	*target = ce
	return ok
}

// A plugin that reuses its idempotency key for a different request gets
// the invalid status (not unavailable).
func TestPluginLockErrIdempotencyConflict(t *testing.T) {
	err := lockErr(&locks.IdempotencyConflictError{Key: "k", OriginalID: "7"})
	if !errors.Is(err, wasm.ErrInvalidLockArg) || !errors.Is(err, locks.ErrIdempotencyConflict) || !strings.Contains(err.Error(), "grant 7") {
		t.Fatalf("lockErr: %v", err)
	}
}

package locks

import (
	"context"
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hostd-dev/hostd/runtime/catalog"
	"github.com/hostd-dev/hostd/sdk/abi"
)

// Issue 12, escape 1: an acquire that repeats another principal's keys,
// owner and idempotency key must not get that principal's grant (nor its
// token), before or after a restart; the victim's own retry still does.
func TestLeaseIdempotencyIsPerPrincipal(t *testing.T) {
	e := newLeaseEnv(t, true)
	bg := context.Background()
	req := AcquireRequest{Owner: "operator", IdempotencyKey: "k", TTL: 30 * time.Second,
		Keys: []abi.ResourceKey{ex("job", "x")}, Principal: TokenPrincipal("ops")}
	victim, err := e.svc.Acquire(bg, req)
	if err != nil {
		t.Fatal(err)
	}
	if victim.Principal != "token:ops" {
		t.Fatalf("grant principal %q", victim.Principal)
	}
	for round := 0; round < 2; round++ {
		for _, thief := range []string{TokenPrincipal("thief"), PluginPrincipal("evil"), PrincipalAnonymous, ""} {
			steal := req
			steal.Principal = thief
			g, err := e.svc.Acquire(bg, steal)
			if g != nil {
				t.Fatalf("round %d: principal %q got grant %+v", round, thief, g)
			}
			wantCode(t, err, "locked")
			if strings.Contains(err.Error(), victim.Token) {
				t.Fatalf("conflict error shows the token: %v", err)
			}
		}
		own, err := e.svc.Acquire(bg, req)
		if err != nil || !own.Duplicate || own.ID != victim.ID || own.Token != victim.Token {
			t.Fatalf("round %d: the owner's retry: %+v %v", round, own, err)
		}
		e.restart()
	}
}

// The *As methods act only on the principal's own grants: with the right
// token, another principal's grant is "not_holder" and stays untouched.
func TestLeaseAsMethodsCheckPrincipal(t *testing.T) {
	e := newLeaseEnv(t, false)
	bg := context.Background()
	key := ex("job", "p")
	g, err := e.svc.Acquire(bg, AcquireRequest{Owner: "operator", Keys: []abi.ResourceKey{key}, Principal: TokenPrincipal("ops")})
	if err != nil {
		t.Fatal(err)
	}
	other := PluginPrincipal("evil")
	_, err = e.svc.RenewAs(bg, other, g.ID, g.Token, time.Minute)
	wantCode(t, err, "not_holder")
	wantCode(t, e.svc.ReleaseAs(bg, other, g.ID, g.Token), "not_holder")
	wantCode(t, e.svc.CheckFenceAs(other, key, g.Fence), "not_holder")
	_, err = e.svc.FenceCheckAs(other, key, g.Fence)
	wantCode(t, err, "not_holder")
	wantCode(t, e.svc.CheckFenceAs("", key, g.Fence), "invalid_argument")
	// Untouched: still held with the same TTL.
	if v, err := e.svc.Get(g.ID); err != nil || v.TTL != g.TTL {
		t.Fatalf("victim's grant changed: %+v %v", v, err)
	}
	// The owner can, through the same methods.
	if err := e.svc.CheckFenceAs(TokenPrincipal("ops"), key, g.Fence); err != nil {
		t.Fatal(err)
	}
	if _, err := e.svc.RenewAs(bg, TokenPrincipal("ops"), g.ID, g.Token, time.Minute); err != nil {
		t.Fatal(err)
	}
	if err := e.svc.ReleaseAs(bg, TokenPrincipal("ops"), g.ID, g.Token); err != nil {
		t.Fatal(err)
	}
	// A second release is a no-op only for the owner.
	wantCode(t, e.svc.ReleaseAs(bg, other, g.ID, g.Token), "not_holder")
	if err := e.svc.ReleaseAs(bg, TokenPrincipal("ops"), g.ID, g.Token); err != nil {
		t.Fatal(err)
	}
}

// putGrantRecord writes a grant record the way an older hostd did (no
// principal, maybe no fingerprint) and returns its fence.
func putGrantRecord(t *testing.T, db catalog.Store, rec map[string]any) uint64 {
	t.Helper()
	fence, err := db.NextSequence(context.Background(), fenceSequence, 1)
	if err != nil {
		t.Fatal(err)
	}
	rec["v"], rec["fence"] = recordVersion, fence
	b, _ := json.Marshal(rec)
	if _, err := db.Commit(context.Background(), &catalog.Batch{Ops: []catalog.Op{{Key: grantKey(fence), Value: b}}}); err != nil {
		t.Fatal(err)
	}
	return fence
}

// Old grant records still load. One without a principal keeps its keys,
// token and fence, but its idempotency key matches no retry; one with a
// principal but no fingerprint matches that principal on the key alone.
func TestLeaseOldRecords(t *testing.T) {
	e := newLeaseEnv(t, false)
	bg := context.Background()
	exp := e.clock.Now().Add(time.Minute)
	legacy := putGrantRecord(t, e.store, map[string]any{"token": "tok-legacy", "owner": "operator", "ttl_ms": 30000,
		"idem": "k", "keys": []map[string]string{{"d": "job", "k": "old", "m": "x"}}, "expires_at": exp})
	nofp := putGrantRecord(t, e.store, map[string]any{"token": "tok-nofp", "owner": "operator", "ttl_ms": 30000,
		"idem": "k2", "principal": "token:ops", "keys": []map[string]string{{"d": "job", "k": "nofp", "m": "x"}}, "expires_at": exp})
	e.restart()
	for _, p := range []string{"", PrincipalAnonymous, TokenPrincipal("ops")} {
		_, err := e.svc.Acquire(bg, AcquireRequest{Owner: "operator", IdempotencyKey: "k", Principal: p, Keys: []abi.ResourceKey{ex("job", "old")}})
		wantCode(t, err, "locked")
	}
	if _, err := e.svc.Renew(bg, itoa(legacy), "tok-legacy", 0); err != nil {
		t.Fatalf("old grant no longer renewable with its token: %v", err)
	}
	// No fingerprint: the key alone matches (a different TTL and meta too).
	g, err := e.svc.Acquire(bg, AcquireRequest{Owner: "operator", IdempotencyKey: "k2", Principal: TokenPrincipal("ops"),
		TTL: 5 * time.Second, Meta: map[string]string{"a": "b"}, Keys: []abi.ResourceKey{ex("job", "nofp")}})
	if err != nil || !g.Duplicate || g.Token != "tok-nofp" || g.Fence != nofp {
		t.Fatalf("old entry without fingerprint: %+v %v", g, err)
	}
	_, err = e.svc.Acquire(bg, AcquireRequest{Owner: "operator", IdempotencyKey: "k2", Principal: TokenPrincipal("thief"), Keys: []abi.ResourceKey{ex("job", "nofp")}})
	wantCode(t, err, "locked")
}

// Issue 11: the idempotency entry keeps a fingerprint of the request.
// Same key + same request: the original grant; same key + a different
// request (keys, mode, owner, effective TTL, meta): conflict naming the
// original grant, also after a restart; nothing is acquired.
func TestLeaseIdempotencyFingerprint(t *testing.T) {
	e := newLeaseEnv(t, true)
	bg := context.Background()
	base := AcquireRequest{Owner: "A", IdempotencyKey: "f", Keys: []abi.ResourceKey{ex("k", "a"), sh("k", "b")},
		Meta: map[string]string{"m": "1"}, Principal: TokenPrincipal("ops")}
	orig, err := e.svc.Acquire(bg, base)
	if err != nil {
		t.Fatal(err)
	}
	same := base
	same.TTL = 10 * time.Second                                             // the service default: the same effective TTL
	same.Keys = []abi.ResourceKey{sh("k", "b"), ex("k", "a"), sh("k", "a")} // same canonical keys
	same.Meta = map[string]string{"m": "1"}
	variants := map[string]func(r *AcquireRequest){
		"other key":   func(r *AcquireRequest) { r.Keys = []abi.ResourceKey{ex("k", "a"), sh("k", "c")} },
		"other mode":  func(r *AcquireRequest) { r.Keys = []abi.ResourceKey{ex("k", "a"), ex("k", "b")} },
		"fewer keys":  func(r *AcquireRequest) { r.Keys = []abi.ResourceKey{ex("k", "a")} },
		"other owner": func(r *AcquireRequest) { r.Owner = "B" },
		"other ttl":   func(r *AcquireRequest) { r.TTL = 11 * time.Second },
		"other meta":  func(r *AcquireRequest) { r.Meta = map[string]string{"m": "2"} },
		"no meta":     func(r *AcquireRequest) { r.Meta = nil },
	}
	for round := 0; round < 2; round++ {
		g, err := e.svc.Acquire(bg, same)
		if err != nil || !g.Duplicate || g.ID != orig.ID {
			t.Fatalf("round %d: same request: %+v %v", round, g, err)
		}
		for name, mut := range variants {
			r := base
			mut(&r)
			g, err := e.svc.Acquire(bg, r)
			var ce *IdempotencyConflictError
			if g != nil || !errors.As(err, &ce) || ce.OriginalID != orig.ID || ce.Key != "f" {
				t.Fatalf("round %d, %s: %+v %v, want a conflict naming grant %s", round, name, g, err, orig.ID)
			}
			wantCode(t, err, "conflict")
		}
		if s := e.svc.Stats(); s.Grants != 1 {
			t.Fatalf("conflicting retries changed state: %+v", s)
		}
		e.restart()
	}
	// Once the original is released, the key is free for a new request.
	if err := e.svc.Release(bg, orig.ID, orig.Token); err != nil {
		t.Fatal(err)
	}
	r := base
	r.Owner = "B"
	if g, err := e.svc.Acquire(bg, r); err != nil || g.Duplicate || g.ID == orig.ID {
		t.Fatalf("after release: %+v %v", g, err)
	}
}

// Issue 11: one TTL rule for acquire, renew and presence: 0 = the default
// (for renew: the grant's TTL); otherwise 1ms..max, else an error naming
// the field ttl.
func TestTTLRule(t *testing.T) {
	e := newLeaseEnv(t, false) // default 10s, max 1m
	bg := context.Background()
	p := NewPresence(PresenceOptions{Clock: e.clock, DefaultTTL: 10 * time.Second, MaxTTL: time.Minute})
	defer p.Close()
	held := e.acquire("renewer", 20*time.Second, ex("ttl", "renew"))
	for i, tc := range []struct {
		ttl  time.Duration
		want time.Duration // 0: an error with code
		code string
	}{
		{0, 10 * time.Second, ""},
		{time.Nanosecond, 0, "invalid_argument"},
		{999 * time.Microsecond, 0, "invalid_argument"},
		{-time.Second, 0, "invalid_argument"},
		{time.Millisecond, time.Millisecond, ""},
		{time.Minute, time.Minute, ""},
		{time.Minute + time.Nanosecond, 0, "ttl_too_long"},
	} {
		check := func(op string, got time.Duration, err error, want time.Duration) {
			t.Helper()
			if tc.code != "" {
				var fe *FieldError
				if !errors.As(err, &fe) || fe.Field != "ttl" {
					t.Errorf("%s ttl %s: %v, want an error naming the field ttl", op, tc.ttl, err)
				}
				if c := ErrorCode(err); c != tc.code {
					t.Errorf("%s ttl %s: code %q, want %q", op, tc.ttl, c, tc.code)
				}
				return
			}
			if err != nil || got != want {
				t.Errorf("%s ttl %s: %s %v, want %s", op, tc.ttl, got, err, want)
			}
		}
		g, err := e.svc.Acquire(bg, AcquireRequest{Owner: "o", TTL: tc.ttl, Keys: []abi.ResourceKey{ex("ttl", itoa(uint64(i)))}})
		var got time.Duration
		if g != nil {
			got = g.TTL
		}
		check("acquire", got, err, tc.want)
		wantRenew := tc.want
		if tc.ttl == 0 {
			wantRenew = 20 * time.Second // renew's default: the grant's TTL
		}
		rg, err := e.svc.Renew(bg, held.ID, held.Token, tc.ttl)
		got = 0
		if rg != nil {
			got = rg.TTL
		}
		check("renew", got, err, wantRenew)
		if _, err := e.svc.Renew(bg, held.ID, held.Token, 20*time.Second); err != nil {
			t.Fatal(err)
		}
		pe, _, err := p.Announce(bg, "ttl", "h"+itoa(uint64(i)), nil, tc.ttl, "")
		got = 0
		if err == nil {
			got = pe.ExpiresAt.Sub(e.clock.Now())
		}
		check("announce", got, err, tc.want)
	}
}

func itoa(n uint64) string { return strconv.FormatUint(n, 10) }

package host

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/hostd-dev/hostd/client"
)

func lockClient(t *testing.T) (*Host, *client.Client) {
	t.Helper()
	h := startHost(t, testConfig(t))
	c, err := client.New(h.URL())
	if err != nil {
		t.Fatal(err)
	}
	return h, c
}

func wantAPICode(t *testing.T, err error, code string) *client.Error {
	t.Helper()
	var ce *client.Error
	if err == nil || !client.HasCode(err, code) {
		t.Fatalf("error %v, want code %q", err, code)
	}
	ce, _ = err.(*client.Error)
	return ce
}

// The lock routes end to end: acquire, conflict details (owner and meta,
// never tokens), renew, inspect, release semantics, error codes.
func TestLocksAPI(t *testing.T) {
	_, c := lockClient(t)
	ctx := context.Background()
	a, err := c.AcquireLock(ctx, client.AcquireLock{Owner: "alice", Meta: map[string]string{"ticket": "OPS-1"}, TTL: "20s",
		Keys: []client.LockKey{{Domain: "host", Key: "10"}, {Domain: "host", Key: "11", Mode: "shared"}}})
	if err != nil {
		t.Fatal(err)
	}
	if a.Token == "" || a.Fence == 0 || len(a.Keys) != 2 || a.Keys[0].Fence != a.Fence {
		t.Fatalf("grant %+v", a)
	}
	_, err = c.AcquireLock(ctx, client.AcquireLock{Owner: "bob", Keys: []client.LockKey{{Domain: "host", Key: "9"}, {Domain: "host", Key: "10"}}})
	ce := wantAPICode(t, err, "locked")
	raw, _ := json.Marshal(ce.Details)
	if strings.Contains(string(raw), a.Token) || !strings.Contains(string(raw), "alice") || !strings.Contains(string(raw), "OPS-1") {
		t.Fatalf("locked details %s", raw)
	}
	if ce.Status != 409 {
		t.Fatalf("status %d", ce.Status)
	}
	// Shared key: a second shared holder is fine.
	s, err := c.AcquireLock(ctx, client.AcquireLock{Owner: "carol", Keys: []client.LockKey{{Domain: "host", Key: "11", Mode: "shared"}}})
	if err != nil {
		t.Fatal(err)
	}
	st, err := c.InspectLock(ctx, "host", "11")
	if err != nil || len(st.Holders) != 2 || st.Mode != "shared" {
		t.Fatalf("inspect %+v %v", st, err)
	}
	l, err := c.ListLocks(ctx, client.Page{Limit: 1})
	if err != nil || len(l.Items) != 1 || l.NextPageToken == "" || l.Items[0].Token != "" {
		t.Fatalf("list %+v %v", l, err)
	}
	l2, err := c.ListLocks(ctx, client.Page{Limit: 1, Token: l.NextPageToken})
	if err != nil || len(l2.Items) != 1 || l2.Items[0].ID != s.ID {
		t.Fatalf("list page 2 %+v %v", l2, err)
	}
	if _, err := c.RenewLock(ctx, a.ID, a.Token, "30s"); err != nil {
		t.Fatal(err)
	}
	_, err = c.RenewLock(ctx, a.ID, "wrong", "")
	wantAPICode(t, err, "not_holder")
	_, err = c.RenewLock(ctx, a.ID, a.Token, "1h")
	wantAPICode(t, err, "ttl_too_long")
	_, err = c.AcquireLock(ctx, client.AcquireLock{Owner: "x", TTL: "11m", Keys: []client.LockKey{{Domain: "d", Key: "k"}}})
	wantAPICode(t, err, "ttl_too_long")
	_, err = c.AcquireLock(ctx, client.AcquireLock{Owner: "x", Keys: []client.LockKey{{Domain: "", Key: "k"}}})
	wantAPICode(t, err, "invalid_key")
	_, err = c.AcquireLock(ctx, client.AcquireLock{Owner: "x", Keys: []client.LockKey{{Domain: "d", Key: "k", Mode: "weird"}}})
	wantAPICode(t, err, "invalid_key")
	_, err = c.AcquireLock(ctx, client.AcquireLock{Owner: "", Keys: []client.LockKey{{Domain: "d", Key: "k"}}})
	wantAPICode(t, err, "invalid_argument")
	if err := c.CheckFence(ctx, "host", "10", a.Fence); err != nil {
		t.Fatal(err)
	}
	wantAPICode(t, c.ReleaseLock(ctx, a.ID, "wrong"), "not_holder")
	if err := c.ReleaseLock(ctx, a.ID, a.Token); err != nil {
		t.Fatal(err)
	}
	if err := c.ReleaseLock(ctx, a.ID, a.Token); err != nil {
		t.Fatalf("second release: %v", err)
	}
	wantAPICode(t, c.CheckFence(ctx, "host", "10", a.Fence), "not_holder")
	_, err = c.GetLock(ctx, a.ID)
	wantAPICode(t, err, "not_found")
	// A waiting acquire is granted when the holder releases.
	done := make(chan error, 1)
	go func() {
		g, err := c.AcquireLock(ctx, client.AcquireLock{Owner: "dave", Wait: "10s", Keys: []client.LockKey{{Domain: "host", Key: "11"}}})
		if err == nil && g.Fence <= s.Fence {
			err = fmt.Errorf("fence %d not above %d", g.Fence, s.Fence)
		}
		done <- err
	}()
	waitUntil(t, func() bool { st, _ := c.InspectLock(ctx, "host", "11"); return st != nil && len(st.Waiters) == 1 })
	if err := c.ReleaseLock(ctx, s.ID, s.Token); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	// Malformed JSON persists nothing and gets a 4xx.
	resp := struct{}{}
	err = c.Do(ctx, "POST", "/v1/locks", json.RawMessage(`{"keys": 5}`), &resp)
	wantAPICode(t, err, "invalid_argument")
}

func waitUntil(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not reached")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestLocksForceReleaseAndPresenceAPI(t *testing.T) {
	_, c := lockClient(t)
	ctx := context.Background()
	a, err := c.AcquireLock(ctx, client.AcquireLock{Owner: "alice", Keys: []client.LockKey{{Domain: "svc", Key: "api"}}})
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.ForceReleaseLock(ctx, "svc", "api", "", "")
	wantAPICode(t, err, "invalid_argument")
	res, err := c.ForceReleaseLock(ctx, "svc", "api", "", "deploy stuck")
	if err != nil {
		t.Fatal(err)
	}
	if res.Fence <= a.Fence || len(res.Evicted) != 1 || res.Evicted[0].ID != a.ID || res.Evicted[0].Token != "" {
		t.Fatalf("force release %+v", res)
	}
	wantAPICode(t, c.CheckFence(ctx, "svc", "api", a.Fence), "not_holder")
	wantAPICode(t, c.ReleaseLock(ctx, a.ID, a.Token), "not_holder")
	audit, err := c.LockAuditLog(ctx, client.Page{})
	if err != nil || len(audit.Items) != 1 || audit.Items[0].Reason != "deploy stuck" || audit.Items[0].Actor != "anonymous" || audit.Items[0].NewFence != res.Fence {
		t.Fatalf("audit %+v %v", audit, err)
	}
	_, err = c.ForceReleaseLock(ctx, "svc", "api", "", "again")
	wantAPICode(t, err, "not_found")

	e1, err := c.Announce(ctx, "host:10", "alice", map[string]string{"tab": "edit"}, "10s", "")
	if err != nil || e1.Token == "" {
		t.Fatalf("announce %+v %v", e1, err)
	}
	e2, err := c.Announce(ctx, "host:10", "bob", nil, "", "")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Announce(ctx, "host:10", "alice", nil, "10s", e1.Token); err != nil {
		t.Fatalf("heartbeat: %v", err)
	}
	_, err = c.Announce(ctx, "host:10", "alice", nil, "", "stolen")
	wantAPICode(t, err, "not_holder")
	wantAPICode(t, c.Withdraw(ctx, "host:10", "bob", e1.Token), "not_holder")
	who, err := c.Who(ctx, "host:10")
	if err != nil || len(who) != 2 {
		t.Fatalf("who %+v %v", who, err)
	}
	if err := c.Withdraw(ctx, "host:10", "bob", e2.Token); err != nil {
		t.Fatal(err)
	}
	who, _ = c.Who(ctx, "host:10")
	if len(who) != 1 || who[0].Holder != "alice" || who[0].Token != "" {
		t.Fatalf("who after withdraw %+v", who)
	}
	_, err = c.Who(ctx, "")
	wantAPICode(t, err, "invalid_key")
}

// ---- linearizability ----

type lockOpKind int

const (
	opAcquire lockOpKind = iota
	opRenew
	opRelease
)

type lockInput struct {
	kind      lockOpKind
	key       string
	id        string // renew, release; acquire: the id it got (for the model)
	call, ret int64  // ns since the start, also known to the model
}

type lockOutput struct {
	ok   bool
	code string // when !ok
	id   string // acquire
}

// lockState is one key's sequential state: its holder and the bounds of
// the holder's expiry (the server starts a TTL somewhere inside the
// acquire's or renew's interval).
type lockState struct {
	holder         string
	minExp, maxExp int64
}

func lockModel(ttl int64) porcupine.Model {
	return porcupine.Model{
		Partition: func(h []porcupine.Operation) [][]porcupine.Operation {
			by := map[string][]porcupine.Operation{}
			for _, op := range h {
				k := op.Input.(lockInput).key
				by[k] = append(by[k], op)
			}
			out := make([][]porcupine.Operation, 0, len(by))
			for _, ops := range by {
				out = append(out, ops)
			}
			return out
		},
		Init: func() any { return lockState{} },
		Step: func(st, in, out any) (bool, any) {
			s, i, o := st.(lockState), in.(lockInput), out.(lockOutput)
			mayBeExpired := s.holder == "" || i.ret >= s.minExp
			mayBeAlive := s.holder != "" && i.call < s.maxExp
			switch i.kind {
			case opAcquire:
				if o.ok {
					return mayBeExpired, lockState{holder: o.id, minExp: i.call + ttl, maxExp: i.ret + ttl}
				}
				return o.code == "locked" && mayBeAlive, s
			case opRenew:
				if o.ok {
					return s.holder == i.id && mayBeAlive, lockState{holder: i.id, minExp: i.call + ttl, maxExp: i.ret + ttl}
				}
				if s.holder != i.id {
					return true, s
				}
				return mayBeExpired, lockState{}
			default: // release
				if o.ok {
					return s.holder == i.id && mayBeAlive, lockState{}
				}
				if s.holder != i.id {
					return o.code == "not_holder", s
				}
				return o.code == "not_holder" && mayBeExpired, lockState{}
			}
		},
		DescribeOperation: func(in, out any) string {
			i, o := in.(lockInput), out.(lockOutput)
			name := [...]string{"acquire", "renew", "release"}[i.kind]
			if o.ok {
				return fmt.Sprintf("%s(%s,%s) ok %s", name, i.key, i.id, o.id)
			}
			return fmt.Sprintf("%s(%s,%s) %s", name, i.key, i.id, o.code)
		},
		DescribeState: func(st any) string {
			s := st.(lockState)
			return fmt.Sprintf("holder=%q exp=[%d,%d]", s.holder, s.minExp, s.maxExp)
		},
	}
}

// Many clients acquire/renew/release a few keys through the API with TTLs
// short enough that grants expire during the run; the history must be
// linearizable against a sequential lock with TTL bounds. HOSTD_LONG=1
// runs longer.
func TestLocksLinearizable(t *testing.T) {
	_, c := lockClient(t)
	const ttl = 150 * time.Millisecond
	clients, rounds := 6, 40
	if os.Getenv("HOSTD_LONG") != "" {
		clients, rounds = 16, 400
	}
	keys := []string{"a", "b", "c"}
	start := time.Now()
	now := func() int64 { return int64(time.Since(start)) }
	var mu sync.Mutex
	var history []porcupine.Operation
	record := func(id int, in lockInput, out lockOutput) {
		mu.Lock()
		history = append(history, porcupine.Operation{ClientId: id, Input: in, Output: out, Call: in.call, Return: in.ret})
		mu.Unlock()
	}
	result := func(err error) lockOutput {
		if err == nil {
			return lockOutput{ok: true}
		}
		if ce, ok := err.(*client.Error); ok {
			return lockOutput{code: ce.Code}
		}
		t.Errorf("transport error: %v", err)
		return lockOutput{code: "transport"}
	}
	var wg sync.WaitGroup
	expected := map[string]bool{"locked": true, "not_holder": true, "expired": true}
	for cl := 0; cl < clients; cl++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(cl), 7))
			ctx := context.Background()
			for r := 0; r < rounds; r++ {
				key := keys[rng.IntN(len(keys))]
				in := lockInput{kind: opAcquire, key: key, call: now()}
				g, err := c.AcquireLock(ctx, client.AcquireLock{Owner: fmt.Sprint("c", cl), TTL: ttl.String(), Keys: []client.LockKey{{Domain: "lin", Key: key}}})
				in.ret = now()
				out := result(err)
				if err == nil {
					out.id = g.ID
				} else if !expected[out.code] {
					t.Errorf("acquire: %v", err)
				}
				record(cl, in, out)
				if err != nil {
					time.Sleep(time.Duration(rng.IntN(20)) * time.Millisecond)
					continue
				}
				for rng.IntN(2) == 0 {
					time.Sleep(time.Duration(rng.IntN(int(ttl/time.Millisecond)*3/2)) * time.Millisecond)
					in := lockInput{kind: opRenew, key: key, id: g.ID, call: now()}
					_, err := c.RenewLock(ctx, g.ID, g.Token, "")
					in.ret = now()
					out := result(err)
					if err != nil && !expected[out.code] {
						t.Errorf("renew: %v", err)
					}
					record(cl, in, out)
				}
				time.Sleep(time.Duration(rng.IntN(int(ttl/time.Millisecond)*3/2)) * time.Millisecond)
				if rng.IntN(8) == 0 {
					continue // walk away: the grant expires
				}
				in = lockInput{kind: opRelease, key: key, id: g.ID, call: now()}
				err = c.ReleaseLock(ctx, g.ID, g.Token)
				in.ret = now()
				out = result(err)
				if err != nil && !expected[out.code] {
					t.Errorf("release: %v", err)
				}
				record(cl, in, out)
			}
		}()
	}
	wg.Wait()
	var expiries int
	for _, op := range history {
		if o := op.Output.(lockOutput); !o.ok && o.code != "locked" {
			expiries++
		}
	}
	res, info := porcupine.CheckOperationsVerbose(lockModel(int64(ttl)), history, 60*time.Second)
	if res != porcupine.Ok {
		path := t.TempDir() + "/history.html"
		if f, err := os.Create(path); err == nil {
			_ = porcupine.Visualize(lockModel(int64(ttl)), info, f)
			f.Close()
		}
		t.Fatalf("history of %d ops is %s (visualization: %s)", len(history), res, path)
	}
	t.Logf("%d operations, %d ended by expiry, linearizable", len(history), expiries)
	if expiries == 0 {
		t.Error("no grant expired during the run: TTLs too long for the test to mean anything")
	}
}

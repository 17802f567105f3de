package broadcast

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hostd-dev/hostd/sdk/abi"
)

// A broadcast blocked on evil:k13 is told it waits for evil:k13 (held by
// the broadcast holding it), not for the first key it wants
// (cluster:cluster); the operator's view shows holders by broadcast ID and
// waiters marked on the key they wait for.
func TestLockWaitNamesKeyAndHolder(t *testing.T) {
	gate := make(chan struct{})
	v := gateEnv(t, gate)
	ctx := context.Background()
	evil := []abi.ResourceKey{key("evil", "k13", abi.Exclusive)}
	a := v.submit(ctx, Request{Message: Message{Type: gateType}, ResourceKeys: evil, Wait: WaitPersisted})

	tctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	_, err := v.e.Submit(tctx, &Request{Message: Message{Type: NoopType}, ResourceKeys: evil})
	var lw *LockWaitError
	if !errors.As(err, &lw) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("blocked submit: %v", err)
	}
	if lw.Key.Domain != "evil" || lw.Key.Key != "k13" || !slices.Equal(lw.Holders, []uint64{a.ID}) {
		t.Fatalf("lock wait error names %+v held by %v, want evil:k13 held by %d", lw.Key, lw.Holders, a.ID)
	}
	if strings.Contains(err.Error(), "cluster:cluster") || !strings.Contains(err.Error(), "evil:k13") {
		t.Fatalf("message names the wrong key: %v", err)
	}

	done := make(chan *Result, 1)
	go func() {
		r, _ := v.e.Submit(ctx, &Request{Message: Message{Type: NoopType}, ResourceKeys: evil})
		done <- r
	}()
	var view []KeyLock
	deadline := time.Now().Add(time.Minute)
	for {
		view = v.e.Locks(LockFilter{})
		if len(view) == 2 && len(view[1].Waiters) == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("view never showed the waiter: %+v", view)
		}
		time.Sleep(2 * time.Millisecond)
	}
	cl, ev := view[0], view[1]
	if cl.Domain != "cluster" || cl.Mode != abi.Shared || len(cl.Holders) != 1 || cl.Holders[0].BroadcastID != a.ID ||
		len(cl.Waiters) != 1 || cl.Waiters[0].BlockedHere {
		t.Fatalf("cluster key: %+v", cl)
	}
	if ev.Domain != "evil" || ev.Key != "k13" || ev.Mode != abi.Exclusive || len(ev.Holders) != 1 || ev.Holders[0].BroadcastID != a.ID ||
		ev.Holders[0].Type != gateType || !ev.Waiters[0].BlockedHere || ev.Waiters[0].Type != NoopType {
		t.Fatalf("evil:k13: %+v", ev)
	}
	if f := v.e.Locks(LockFilter{Domain: "evil", Key: "k13"}); len(f) != 1 || f[0].Key != "k13" {
		t.Fatalf("filtered: %+v", f)
	}
	if f := v.e.Locks(LockFilter{Domain: "collection"}); len(f) != 0 {
		t.Fatalf("filter on another domain: %+v", f)
	}
	close(gate)
	if r := <-done; r == nil || r.State != StateTombstone {
		t.Fatalf("waiter: %+v", r)
	}
	v.waitState(a.ID, StateTombstone)
	if l := v.e.Locks(LockFilter{}); len(l) != 0 {
		t.Fatalf("keys still shown after every task finished: %+v", l)
	}
}

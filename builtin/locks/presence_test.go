package locks

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"
)

// Scenario 10: two holders both listed; one withdraws, the other stays; an
// entry without heartbeat disappears after its TTL; no duplicates under
// concurrent announces.
func TestPresenceScenario10(t *testing.T) {
	clk := newFakeClock()
	p := NewPresence(PresenceOptions{Clock: clk, MaxTTL: time.Minute})
	defer p.Close()
	bg := context.Background()
	_, ta, err := p.Announce(bg, "host:10", "alice", map[string]string{"page": "edit"}, 10*time.Second, "")
	if err != nil {
		t.Fatal(err)
	}
	_, tb, err := p.Announce(bg, "host:10", "bob", nil, 10*time.Second, "")
	if err != nil {
		t.Fatal(err)
	}
	who, _ := p.Who(bg, "host:10")
	if len(who) != 2 || who[0].Holder != "alice" || who[0].Meta["page"] != "edit" || who[1].Holder != "bob" {
		t.Fatalf("who = %+v", who)
	}
	// Only the holder's own entry can be withdrawn.
	wantCode(t, p.Withdraw(bg, "host:10", "bob", ta), "not_holder")
	_, _, err = p.Announce(bg, "host:10", "bob", nil, 0, "stolen")
	wantCode(t, err, "not_holder")
	if err := p.Withdraw(bg, "host:10", "alice", ta); err != nil {
		t.Fatal(err)
	}
	who, _ = p.Who(bg, "host:10")
	if len(who) != 1 || who[0].Holder != "bob" {
		t.Fatalf("who after withdraw = %+v", who)
	}
	// Heartbeat keeps bob; without it he disappears after the TTL.
	clk.Advance(8 * time.Second)
	if _, _, err := p.Announce(bg, "host:10", "bob", nil, 10*time.Second, tb); err != nil {
		t.Fatal(err)
	}
	clk.Advance(8 * time.Second)
	if who, _ = p.Who(bg, "host:10"); len(who) != 1 {
		t.Fatalf("heartbeat lost: %+v", who)
	}
	clk.Advance(3 * time.Second)
	if who, _ = p.Who(bg, "host:10"); len(who) != 0 {
		t.Fatalf("expired entry listed: %+v", who)
	}
	p.Sweep()
	if p.Len() != 0 {
		t.Fatalf("expired entries kept in memory: %d", p.Len())
	}
	// Concurrent announces of one holder: one entry.
	var wg sync.WaitGroup
	for i := 0; i < 50; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, _, _ = p.Announce(bg, "host:11", "carol", nil, 0, "")
			_, _, _ = p.Announce(bg, "host:11", fmt.Sprint("h", i%5), nil, 0, "")
		}()
	}
	wg.Wait()
	if who, _ = p.Who(bg, "host:11"); len(who) != 6 {
		t.Fatalf("duplicates or losses: %d entries %+v", len(who), who)
	}
	_, _, err = p.Announce(bg, "", "x", nil, 0, "")
	wantCode(t, err, "invalid_key")
	_, _, err = p.Announce(bg, "k", "x", nil, time.Hour, "")
	wantCode(t, err, "ttl_too_long")
}

// Presence and lease locks never block each other.
func TestPresenceIndependentOfLeases(t *testing.T) {
	e := newLeaseEnv(t, false)
	p := NewPresence(PresenceOptions{Clock: e.clock})
	defer p.Close()
	g := e.acquire("A", 0, ex("host", "10"))
	if _, _, err := p.Announce(context.Background(), "host:10", "bob", nil, 0, ""); err != nil {
		t.Fatal(err)
	}
	if err := e.svc.Release(context.Background(), g.ID, g.Token); err != nil {
		t.Fatal(err)
	}
	e.acquire("B", 0, ex("host", "10"))
}

// Scenario 11: 100 concurrent single-flight callers: the function runs once.
func TestFlightScenario11(t *testing.T) {
	var f Flight[int]
	var runs int
	var mu sync.Mutex
	release := make(chan struct{})
	var wg sync.WaitGroup
	results := make([]int, 100)
	shared := 0
	for i := 0; i < 100; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			v, sh, err := f.Do(context.Background(), "k", func(context.Context) (int, error) {
				mu.Lock()
				runs++
				mu.Unlock()
				<-release
				return 42, nil
			})
			if err != nil {
				t.Error(err)
			}
			results[i] = v
			mu.Lock()
			if sh {
				shared++
			}
			mu.Unlock()
		}()
	}
	// Everyone joins before the function returns.
	waitFor(t, func() bool {
		f.mu.Lock()
		defer f.mu.Unlock()
		c := f.calls["k"]
		return c != nil && c.shared == 99
	})
	close(release)
	wg.Wait()
	if runs != 1 {
		t.Fatalf("function ran %d times", runs)
	}
	for _, v := range results {
		if v != 42 {
			t.Fatalf("results %v", results)
		}
	}
	if shared != 100 || f.InFlight() != 0 {
		t.Fatalf("shared=%d inflight=%d", shared, f.InFlight())
	}
}

func TestFlightErrorAndPanicClear(t *testing.T) {
	var f Flight[string]
	bg := context.Background()
	_, _, err := f.Do(bg, "k", func(context.Context) (string, error) { return "", fmt.Errorf("boom") })
	if err == nil || err.Error() != "boom" {
		t.Fatalf("err = %v", err)
	}
	_, _, err = f.Do(bg, "k", func(context.Context) (string, error) { panic("kaput") })
	var pe *PanicError
	if !asPanic(err, &pe) || pe.Value != "kaput" {
		t.Fatalf("err = %v", err)
	}
	v, _, err := f.Do(bg, "k", func(context.Context) (string, error) { return "ok", nil })
	if err != nil || v != "ok" {
		t.Fatalf("after panic: %q %v", v, err)
	}
	// A caller whose ctx ends stops waiting; the flight finishes for others.
	ctx, cancel := context.WithCancel(bg)
	release := make(chan struct{})
	done := make(chan string)
	go func() {
		v, _, _ := f.Do(bg, "slow", func(context.Context) (string, error) { <-release; return "late", nil })
		done <- v
	}()
	waitFor(t, func() bool { return f.InFlight() == 1 })
	cancel()
	_, _, err = f.Do(ctx, "slow", func(context.Context) (string, error) { return "", nil })
	wantCode(t, err, "canceled")
	close(release)
	if v := <-done; v != "late" {
		t.Fatalf("leader got %q", v)
	}
}

func asPanic(err error, pe **PanicError) bool {
	p, ok := err.(*PanicError)
	*pe = p
	return ok
}

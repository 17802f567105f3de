package sched

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func TestBackoffDefaults(t *testing.T) {
	b, err := NewBackoff(DefaultBackoff())
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for range 14 {
		got = append(got, b.Next().String())
	}
	want := "10ms 20ms 40ms 80ms 160ms 320ms 640ms 1.28s 2.56s 5.12s 10s 10s 10s 10s"
	if strings.Join(got, " ") != want {
		t.Fatalf("delays %v, want %s", got, want)
	}
	b.Reset()
	if d := b.Next(); d != 10*time.Millisecond || b.Attempt() != 1 {
		t.Fatalf("after reset: %v attempt %d", d, b.Attempt())
	}
	if d := DefaultBackoff().Delay(1 << 30); d != 10*time.Second {
		t.Fatalf("huge attempt: %v", d)
	}
}

func TestBackoffJitterSeeded(t *testing.T) {
	cfg := DefaultBackoff()
	cfg.Jitter, cfg.Seed = 0.5, 42
	a, _ := NewBackoff(cfg)
	b, _ := NewBackoff(cfg)
	for i := range 20 {
		da, db := a.Next(), b.Next()
		if da != db {
			t.Fatalf("same seed, attempt %d: %v vs %v", i, da, db)
		}
		full := cfg.Delay(i)
		if da > full || da < full/2 {
			t.Fatalf("attempt %d: %v outside [%v, %v]", i, da, full/2, full)
		}
	}
}

func TestBackoffValidate(t *testing.T) {
	err := BackoffConfig{Initial: -1, Max: -2, Multiplier: 0.5, Jitter: 2}.Validate()
	for _, want := range []string{"backoff.initial", "backoff.max", "backoff.multiplier", "backoff.jitter"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Fatalf("Validate() = %v, lacks %s", err, want)
		}
	}
	if _, err := NewBackoff(BackoffConfig{}); err == nil {
		t.Fatal("zero config accepted")
	}
}

func TestQueue(t *testing.T) {
	q := NewQueue[string]()
	if _, ok := q.Next(); ok {
		t.Fatal("empty queue has a next")
	}
	q.Schedule("c", t0.Add(3*time.Second))
	q.Schedule("a", t0.Add(1*time.Second))
	q.Schedule("b", t0.Add(1*time.Second)) // tie: after a
	q.Schedule("d", t0.Add(9*time.Second))
	q.Schedule("d", t0.Add(2*time.Second)) // moved earlier
	q.Schedule("e", t0.Add(5*time.Second))
	if !q.Remove("e") || q.Remove("e") {
		t.Fatal("remove")
	}
	if n, _ := q.Next(); !n.Equal(t0.Add(time.Second)) {
		t.Fatalf("next = %v", n)
	}
	steps := []struct {
		at   time.Duration
		want string
	}{
		{0, "[]"},
		{time.Second, "[a b]"},
		{2500 * time.Millisecond, "[d]"},
		{time.Hour, "[c]"},
	}
	for _, s := range steps {
		if got := fmt.Sprint(q.Due(t0.Add(s.at))); got != s.want {
			t.Fatalf("Due(+%v) = %s, want %s", s.at, got, s.want)
		}
	}
	if q.Len() != 0 {
		t.Fatalf("len %d", q.Len())
	}
}

func TestQueueRandomOrder(t *testing.T) {
	q := NewQueue[int]()
	// Deterministic pseudo-random schedule; popping must be sorted.
	x := uint32(7)
	for i := 0; i < 500; i++ {
		x = x*1664525 + 1013904223
		q.Schedule(i, t0.Add(time.Duration(x%1000)*time.Millisecond))
	}
	last := t0.Add(-time.Hour)
	for q.Len() > 0 {
		next, _ := q.Next()
		if next.Before(last) {
			t.Fatalf("out of order: %v before %v", next, last)
		}
		last = next
		for _, k := range q.Due(next) {
			if d, ok := q.DueAt(k); ok {
				t.Fatalf("popped key %d still scheduled at %v", k, d)
			}
		}
	}
}

func TestFakeClock(t *testing.T) {
	c := NewFakeClock(t0)
	a := c.After(2 * time.Second)
	b := c.After(time.Second)
	now := c.After(0)
	select {
	case <-now:
	default:
		t.Fatal("After(0) did not fire at once")
	}
	c.Advance(999 * time.Millisecond)
	select {
	case <-a:
		t.Fatal("fired early")
	case <-b:
		t.Fatal("fired early")
	default:
	}
	c.Advance(time.Millisecond)
	if got := <-b; !got.Equal(t0.Add(time.Second)) {
		t.Fatalf("b fired with %v", got)
	}
	if c.Waiters() != 1 {
		t.Fatalf("waiters %d", c.Waiters())
	}
	c.Advance(time.Hour)
	<-a
	if !c.Now().Equal(t0.Add(time.Hour + time.Second)) {
		t.Fatalf("now %v", c.Now())
	}
}

// TestFakeClockDrivesRetryLoop runs a goroutine retry loop on the fake
// clock: BlockUntil makes the test advance exactly when the loop waits.
func TestFakeClockDrivesRetryLoop(t *testing.T) {
	c := NewFakeClock(t0)
	b, _ := NewBackoff(DefaultBackoff())
	var mu sync.Mutex
	var tries []time.Duration
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 0; i < 5; i++ {
			mu.Lock()
			tries = append(tries, c.Now().Sub(t0))
			mu.Unlock()
			<-c.After(b.Next())
		}
	}()
	for i := 0; i < 5; i++ {
		c.BlockUntil(1)
		next := 10 * time.Millisecond << i
		c.Advance(next)
	}
	<-done
	want := "[0s 10ms 30ms 70ms 150ms]"
	if got := fmt.Sprint(tries); got != want {
		t.Fatalf("tries at %s, want %s", got, want)
	}
}

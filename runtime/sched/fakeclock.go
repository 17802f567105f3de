package sched

import (
	"sort"
	"sync"
	"time"
)

// FakeClock is a Clock for tests: time moves only when Advance or Set is
// called, and After channels fire when the clock passes their deadline.
// Safe for concurrent use.
type FakeClock struct {
	mu      sync.Mutex
	now     time.Time
	waiters []fakeWaiter
	changed chan struct{} // closed and replaced when waiters change
}

type fakeWaiter struct {
	at time.Time
	ch chan time.Time
}

var _ Clock = (*FakeClock)(nil)

// NewFakeClock returns a fake clock reading t0.
func NewFakeClock(t0 time.Time) *FakeClock {
	return &FakeClock{now: t0, changed: make(chan struct{})}
}

// Now returns the fake time.
func (c *FakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// After returns a channel that receives the fake time once the clock has
// advanced by d (at once when d <= 0).
func (c *FakeClock) After(d time.Duration) <-chan time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	ch := make(chan time.Time, 1)
	if d <= 0 {
		ch <- c.now
		return ch
	}
	c.waiters = append(c.waiters, fakeWaiter{at: c.now.Add(d), ch: ch})
	c.notify()
	return ch
}

// Advance moves the clock forward by d and fires every After whose
// deadline is reached, earliest first.
func (c *FakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.setLocked(c.now.Add(d))
}

// Set moves the clock to t (a step backwards fires nothing).
func (c *FakeClock) Set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.setLocked(t)
}

func (c *FakeClock) setLocked(t time.Time) {
	c.now = t
	sort.SliceStable(c.waiters, func(i, j int) bool { return c.waiters[i].at.Before(c.waiters[j].at) })
	n := 0
	for _, w := range c.waiters {
		if w.at.After(t) {
			break
		}
		w.ch <- t
		n++
	}
	if n > 0 {
		c.waiters = append(c.waiters[:0], c.waiters[n:]...)
		c.notify()
	}
}

func (c *FakeClock) notify() {
	close(c.changed)
	c.changed = make(chan struct{})
}

// Waiters returns how many After channels have not fired yet.
func (c *FakeClock) Waiters() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.waiters)
}

// BlockUntil waits until at least n After channels are pending, so a test
// can advance the clock only once the code under test is waiting on it.
func (c *FakeClock) BlockUntil(n int) {
	for {
		c.mu.Lock()
		if len(c.waiters) >= n {
			c.mu.Unlock()
			return
		}
		ch := c.changed
		c.mu.Unlock()
		<-ch
	}
}

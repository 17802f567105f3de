package locks

import (
	"sync"
	"time"
)

// fakeClock is a manual clock with a wall reading that can be stepped
// independently of its monotonic reading (locks scenario 8).
type fakeClock struct {
	mu     sync.Mutex
	wall   time.Time
	mono   time.Duration
	timers []fakeTimer
}

type fakeTimer struct {
	at time.Duration
	ch chan time.Time
}

func newFakeClock() *fakeClock {
	return &fakeClock{wall: time.Date(2026, 11, 30, 4, 0, 0, 0, time.UTC)}
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.wall
}

func (c *fakeClock) Monotonic() time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.mono
}

func (c *fakeClock) After(d time.Duration) <-chan time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	ch := make(chan time.Time, 1)
	if d <= 0 {
		ch <- c.wall
		return ch
	}
	c.timers = append(c.timers, fakeTimer{at: c.mono + d, ch: ch})
	return ch
}

// Advance moves both readings forward and fires due timers.
func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.mono += d
	c.wall = c.wall.Add(d)
	keep := c.timers[:0]
	for _, t := range c.timers {
		if t.at <= c.mono {
			t.ch <- c.wall
		} else {
			keep = append(keep, t)
		}
	}
	c.timers = keep
}

// StepWall moves only the wall reading (an NTP step, a manual change).
func (c *fakeClock) StepWall(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.wall = c.wall.Add(d)
}

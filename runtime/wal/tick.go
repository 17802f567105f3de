package wal

import (
	"sync"

	"github.com/hostd-dev/hostd/runtime/sched"
)

// tickClock hands out time ticks: hybrid logical timestamps in Unix
// nanoseconds that strictly increase across every queue of the process.
// It is seeded at Open above the largest tick persisted, so ticks also
// increase across restarts, even if the wall clock went backwards.
type tickClock struct {
	mu    sync.Mutex
	clock sched.Clock
	last  uint64
}

// next reserves n consecutive ticks and returns the first.
func (c *tickClock) next(n int) uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := c.last + 1
	if now := c.clock.Now().UnixNano(); now > 0 && uint64(now) > t {
		t = uint64(now)
	}
	c.last = t + uint64(n) - 1
	return t
}

func (c *tickClock) observe(t uint64) {
	c.mu.Lock()
	if t > c.last {
		c.last = t
	}
	c.mu.Unlock()
}

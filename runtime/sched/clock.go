package sched

import "time"

// Clock is the injected time source of every deterministic core in hostd.
// Production code uses Real; tests use a fake clock they advance by hand.
type Clock interface {
	// Now returns the current time. Real clocks include a monotonic reading.
	Now() time.Time
	// After returns a channel that receives once d has elapsed on this clock.
	After(d time.Duration) <-chan time.Time
}

// Real is the wall clock (with Go's monotonic reading).
var Real Clock = realClock{}

type realClock struct{}

func (realClock) Now() time.Time                         { return time.Now() }
func (realClock) After(d time.Duration) <-chan time.Time { return time.After(d) }

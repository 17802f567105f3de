package sched_test

import (
	"fmt"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/hostd-dev/hostd/runtime/sched"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func ExampleQueue() {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	clock := sched.NewFakeClock(t0)
	q := sched.NewQueue[string]()
	b, _ := sched.NewBackoff(sched.DefaultBackoff())
	q.Schedule("task-1", clock.Now().Add(b.Next()))
	q.Schedule("task-2", clock.Now().Add(time.Second))
	next, _ := q.Next()
	fmt.Println("wake at +", next.Sub(t0))
	clock.Advance(next.Sub(clock.Now()))
	fmt.Println("due:", q.Due(clock.Now()))
	// Output:
	// wake at + 10ms
	// due: [task-1]
}

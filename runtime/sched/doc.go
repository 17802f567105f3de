// Package sched holds hostd's retry and timing building blocks, all driven
// by an injected Clock so that the cores using them are deterministic in
// tests.
//
//   - Clock / Real: the time source; production passes sched.Real.
//   - FakeClock: a test clock that moves only on Advance/Set and fires
//     After channels in deadline order; BlockUntil(n) waits until the code
//     under test is blocked on n timers, so tests never sleep.
//   - BackoffConfig / Backoff: exponential backoff, 10 ms ×2 capped at 10 s
//     by default, with optional seeded jitter (off by default: the same
//     inputs give the same delays). BackoffConfig.Delay(n) is the pure
//     formula; Backoff hands out successive delays and Resets on success.
//   - Queue: a due-time queue of keys (one schedule per key; rescheduling
//     moves it). Due(now) pops what is due, earliest first; Next() tells
//     when to wake up. It never reads a clock.
//
// A typical retry loop (the goroutine shell around a deterministic core):
//
//	q := sched.NewQueue[string]()
//	for {
//		for _, id := range q.Due(clock.Now()) {
//			if err := try(id); err != nil {
//				q.Schedule(id, clock.Now().Add(backoffs[id].Next()))
//			}
//		}
//		next, ok := q.Next()
//		wait := time.Hour
//		if ok { wait = next.Sub(clock.Now()) }
//		select {
//		case <-clock.After(wait):
//		case <-kick: // new work
//		case <-stop:
//			return
//		}
//	}
//
// Queue and Backoff are not safe for concurrent use; FakeClock is.
package sched

package wasm

import (
	"context"
	"sync"
	"time"

	"github.com/tetratelabs/wazero/api"
)

// reassertEvery is how often a stop is written again while the guest has
// not trapped yet (see watchdog).
const reassertEvery = 5 * time.Millisecond

// watchdog stops an instrumented instance's call (see instrument) at its
// deadline (its own reusable timer) or when the caller's context ends
// (context.AfterFunc on that context, only if it can end), by writing
// stopValue into the guest's interrupt counter; the guest traps at its next
// check, and the caller classifies the error (disarm reports whether the
// deadline passed). After every call the counter is set back to budget.
//
// The guest itself decrements the counter, so it can overwrite a stop
// written between its read and its write; once stopping, the stop is
// therefore written again every reassertEvery until the call ends.
//
// Locking: mu serializes the host's writes of the counter (the call's
// goroutine in arm/disarm; the timer and context callbacks). gen tells a
// context callback of an earlier call from the current one; a timer
// callback of an earlier call finds the current call's deadline not yet
// passed and does nothing.
type watchdog struct {
	counter api.MutableGlobal
	timer   *time.Timer // the deadline, then re-asserts the stop

	mu       sync.Mutex
	gen      uint64
	armed    bool
	deadline time.Time
	stopping bool
	expired  bool // the deadline passed while armed
	killed   bool // the plugin version is closing: stop every call
	stopCtx  func() bool
	// cancel ends the call's own context: kill calls it so that a guest
	// blocked in a host call (which honours that context) returns too.
	cancel context.CancelFunc
}

func newWatchdog(counter api.MutableGlobal) *watchdog {
	w := &watchdog{counter: counter}
	w.timer = time.AfterFunc(time.Hour, w.tick)
	w.timer.Stop()
	return w
}

// arm watches the call about to start: it is stopped when parent ends or
// after timeout; cancel ends the call's context (see kill).
func (w *watchdog) arm(parent context.Context, timeout time.Duration, cancel context.CancelFunc) {
	if w == nil {
		return
	}
	w.mu.Lock()
	w.gen++
	gen := w.gen
	w.armed, w.stopping, w.expired = true, false, false
	w.deadline = time.Now().Add(timeout)
	w.cancel = cancel
	if w.killed {
		w.stopLocked()
		cancel()
	} else {
		w.timer.Reset(timeout)
	}
	w.mu.Unlock()
	w.stopCtx = nil
	if parent.Done() != nil {
		w.stopCtx = context.AfterFunc(parent, func() { w.stop(gen) })
	}
}

// kill stops the current call, if any, and every later one: the plugin
// version is closing.
func (w *watchdog) kill() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.killed = true
	if w.armed {
		w.stopLocked()
		w.cancel()
	}
}

// disarm ends the watch, gives the next call a full budget and reports
// whether the call's deadline passed while it ran.
func (w *watchdog) disarm() (expired bool) {
	if w == nil {
		return false
	}
	if w.stopCtx != nil {
		w.stopCtx()
	}
	w.timer.Stop()
	w.mu.Lock()
	defer w.mu.Unlock()
	w.armed, w.stopping, w.cancel = false, false, nil
	w.counter.Set(api.EncodeI32(budget))
	return w.expired
}

// close releases the timer of a discarded instance.
func (w *watchdog) close() {
	if w != nil {
		w.timer.Stop()
	}
}

// stop is the caller's context ending.
func (w *watchdog) stop(gen uint64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.armed || w.gen != gen {
		return
	}
	w.stopLocked()
}

func (w *watchdog) stopLocked() {
	w.stopping = true
	w.counter.Set(api.EncodeI32(stopValue))
	w.timer.Reset(reassertEvery)
}

// tick is the deadline, or a re-assertion of a stop.
func (w *watchdog) tick() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.armed {
		return
	}
	if !w.stopping {
		if time.Now().Before(w.deadline) {
			return // a late callback of an earlier call
		}
		w.expired = true
	}
	w.stopLocked()
}

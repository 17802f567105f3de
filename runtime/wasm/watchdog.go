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

// watchdog stops an instrumented instance's call (see instrument) when the
// call's context ends, by writing stopValue into the guest's interrupt
// counter; the guest traps at its next function entry or loop header, and
// the caller, seeing the context's error, reports a timeout or a
// cancellation. After every call the counter is set back to budget.
//
// The guest itself decrements the counter, so it can overwrite a stop
// written between its read and its write; while the call has not ended the
// stop is therefore written again every reassertEvery (a two-instruction
// window: in practice the first write is the one that counts).
//
// Locking: mu serializes the host's writes of the counter (the call's
// goroutine in disarm; the context and timer callbacks). gen tells a
// context callback of an earlier call (one that started before disarm took
// mu) from the current one.
type watchdog struct {
	counter api.MutableGlobal
	timer   *time.Timer // re-asserts a stop; runs only while stopping

	mu       sync.Mutex
	gen      uint64
	armed    bool
	stopping bool
	killed   bool // the plugin version is closing: stop every call
	stopCtx  func() bool
}

func newWatchdog(counter api.MutableGlobal) *watchdog {
	w := &watchdog{counter: counter}
	w.timer = time.AfterFunc(time.Hour, w.tick)
	w.timer.Stop()
	return w
}

// arm watches ctx for the call about to start.
func (w *watchdog) arm(ctx context.Context) {
	if w == nil {
		return
	}
	w.mu.Lock()
	w.gen++
	gen := w.gen
	w.armed, w.stopping = true, false
	if w.killed {
		w.stopLocked()
	}
	w.mu.Unlock()
	w.stopCtx = context.AfterFunc(ctx, func() { w.stop(gen) })
}

// kill stops the current call, if any, and every later one: the plugin
// version is closing.
func (w *watchdog) kill() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.killed = true
	if w.armed {
		w.stopLocked()
	}
}

// disarm ends the watch and gives the next call a full budget.
func (w *watchdog) disarm() {
	if w == nil {
		return
	}
	w.stopCtx()
	w.timer.Stop()
	w.mu.Lock()
	w.armed, w.stopping = false, false
	w.counter.Set(api.EncodeI32(budget))
	w.mu.Unlock()
}

// close releases the timer of a discarded instance.
func (w *watchdog) close() {
	if w != nil {
		w.timer.Stop()
	}
}

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

func (w *watchdog) tick() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.armed || !w.stopping {
		return
	}
	w.counter.Set(api.EncodeI32(stopValue))
	w.timer.Reset(reassertEvery)
}

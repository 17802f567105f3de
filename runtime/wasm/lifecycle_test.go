package wasm

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/hostd-dev/hostd/internal/wasmtest"
)

// fakeClock fires After only when the test advances it.
type fakeClock struct {
	mu      sync.Mutex
	now     time.Time
	waiters []fakeWaiter
	waits   []time.Duration // every After duration, in order
}

type fakeWaiter struct {
	at time.Time
	ch chan time.Time
}

func (c *fakeClock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }
func (c *fakeClock) After(d time.Duration) <-chan time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	ch := make(chan time.Time, 1)
	c.waiters = append(c.waiters, fakeWaiter{c.now.Add(d), ch})
	c.waits = append(c.waits, d)
	return ch
}
func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
	kept := c.waiters[:0]
	for _, w := range c.waiters {
		if !w.at.After(c.now) {
			w.ch <- c.now
		} else {
			kept = append(kept, w)
		}
	}
	c.waiters = kept
}
func (c *fakeClock) Waits() []time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]time.Duration(nil), c.waits...)
}

// A plugin whose instances keep failing to start is backed off
// exponentially and reported; calls fail fast as unavailable instead of
// hanging; when starting works again, it recovers.
func TestCrashLoopBackoff(t *testing.T) {
	clock := &fakeClock{now: time.Unix(1000, 0)}
	r := mustRuntime(t, Config{Plugins: []Spec{{Name: "faults", Path: faultsWasm(t)}}, Defaults: Limits{PoolSize: 1},
		Clock: clock, BackoffInitial: 100 * time.Millisecond, BackoffMax: 400 * time.Millisecond})
	var failing atomic.Bool
	failing.Store(true)
	fault := func(string) error {
		if failing.Load() {
			return errors.New("injected start failure")
		}
		return nil
	}
	testStartFault.Store(&fault)
	defer testStartFault.Store(nil)

	if _, err := r.Ack(bg, msg("Trap", "trap")); KindOf(err) != KindTrap {
		t.Fatalf("trap: %v", err)
	}
	waitFor(t, func() bool { return len(clock.Waits()) >= 1 })
	_, err := r.Ack(bg, msg("Trap", "ok"))
	if KindOf(err) != KindUnavailable || !strings.Contains(err.Error(), "injected start failure") {
		t.Fatalf("call while failing to start: %v", err)
	}
	for i := 0; i < 4; i++ {
		n := len(clock.Waits())
		clock.Advance(time.Second)
		waitFor(t, func() bool { return len(clock.Waits()) > n })
	}
	want := []time.Duration{100, 200, 400, 400, 400}
	for i, w := range clock.Waits() {
		if w != want[i]*time.Millisecond {
			t.Fatalf("backoff delays = %v, want %v ms", clock.Waits(), want)
		}
	}
	if l := r.List()[0]; l.StartFailures != 5 || l.Live != 0 {
		t.Fatalf("List = %+v", l)
	}
	failing.Store(false)
	clock.Advance(time.Second)
	waitFor(t, func() bool { return r.List()[0].Live == 1 })
	if _, err := r.Ack(bg, msg("Trap", "ok")); err != nil {
		t.Fatalf("after recovery: %v", err)
	}
	if l := r.List()[0]; l.StartFailures != 0 {
		t.Fatalf("start failures not reset: %+v", l)
	}
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not reached in 5s")
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// Close with calls in flight and a refill backing off: every goroutine
// ends (TestMain checks with goleak), later calls get ErrClosed.
func TestCloseWithWorkInFlight(t *testing.T) {
	r, err := New(context.Background(), Config{CacheDir: wasmtest.CacheDir(), Logger: slog.New(slog.DiscardHandler), Plugins: []Spec{
		{Name: "faults", Path: faultsWasm(t), Limits: Limits{CallTimeout: 5 * time.Second, PoolSize: 2}},
		{Name: "echo", Path: echoWasm(t)},
	}, Defaults: Limits{PoolSize: 1}})
	if err != nil {
		t.Fatal(err)
	}
	fault := func(string) error { return errors.New("injected") }
	testStartFault.Store(&fault)
	defer testStartFault.Store(nil)
	// faults: trap one instance while echo's refills are failing too, so
	// refill goroutines are running or backing off at Close.
	if _, err := r.Ack(bg, msg("Trap", "trap")); KindOf(err) != KindTrap {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for i := 0; i < 4; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := r.Ack(bg, msg("Loop", "loop"))
			errs <- err
		}()
	}
	time.Sleep(50 * time.Millisecond)
	start := time.Now()
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if KindOf(err) != KindUnavailable {
			t.Fatalf("loop call across Close: %v, want unavailable", err)
		}
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("Close took %v with endless loops in flight", d)
	}
	if _, err := r.Ack(bg, msg("Echo", "ok")); !errors.Is(err, ErrClosed) {
		t.Fatalf("after Close: %v", err)
	}
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
}

// Each call has a span with the plugin's name; guest span events and
// attributes land on it; failures are recorded.
func TestSpans(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	defer tp.Shutdown(bg)
	r := mustRuntime(t, Config{Plugins: []Spec{{Name: "echo", Path: echoWasm(t)}}, TracerProvider: tp, Defaults: Limits{PoolSize: 1}})
	if _, err := r.Ack(bg, msg("Echo", "log x1")); err != nil {
		t.Fatal(err)
	}
	r.Ack(bg, msg("Echo", "fail"))
	spans := rec.Ended()
	if len(spans) != 2 || spans[0].Name() != "plugin.ack" {
		t.Fatalf("spans = %v", spans)
	}
	s := spans[0]
	attrs := map[string]string{}
	for _, a := range s.Attributes() {
		attrs[string(a.Key)] = a.Value.Emit()
	}
	if attrs["hostd.plugin"] != "echo" || attrs["hostd.message.type"] != "Echo" || attrs["echo.attr"] != "x1" {
		t.Fatalf("attrs = %v", attrs)
	}
	if len(s.Events()) != 1 || s.Events()[0].Name != "echo.event" || s.Events()[0].Attributes[0].Value.Emit() != "x1" {
		t.Fatalf("events = %+v", s.Events())
	}
	if spans[1].Status().Code != 1 /* codes.Error */ || len(spans[1].Events()) == 0 {
		t.Fatalf("failed call span: %+v", spans[1].Status())
	}
}

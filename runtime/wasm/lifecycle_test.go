package wasm

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
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
	// Generous: conditions may wait for an instance to start, which
	// takes seconds under -race on a loaded machine.
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not reached in 30s")
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// Close with calls in flight and a refill backing off: every goroutine
// ends (TestMain checks with goleak), later calls get ErrClosed.
func TestCloseWithWorkInFlight(t *testing.T) {
	r, err := New(context.Background(), Config{CacheDir: wasmtest.CacheDir(), Logger: slog.New(slog.DiscardHandler), Plugins: []Spec{
		{Name: "faults", Path: faultsWasm(t), Limits: Limits{CallTimeout: time.Minute, PoolSize: 2}},
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
	r.mu.RLock()
	fv := r.versions["faults"]
	r.mu.RUnlock()
	base := fv.refs.Load()
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
	// Close only once all four calls are in flight (past the closed
	// check); a call that starts after Close gets ErrClosed instead.
	waitFor(t, func() bool { return fv.refs.Load() >= base+4 })
	time.Sleep(20 * time.Millisecond) // let one reach the guest's loop
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
	// The loops' call timeout is a minute: a Close that waited for it
	// instead of stopping them would take that long.
	if d := time.Since(start); d > 15*time.Second {
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
		attrs[string(a.Key)] = a.Value.String()
	}
	if attrs["hostd.plugin"] != "echo" || attrs["hostd.message.type"] != "Echo" || attrs["echo.attr"] != "x1" {
		t.Fatalf("attrs = %v", attrs)
	}
	if len(s.Events()) != 1 || s.Events()[0].Name != "echo.event" || s.Events()[0].Attributes[0].Value.String() != "x1" {
		t.Fatalf("events = %+v", s.Events())
	}
	if spans[1].Status().Code != 1 /* codes.Error */ || len(spans[1].Events()) == 0 {
		t.Fatalf("failed call span: %+v", spans[1].Status())
	}
}

// Guests get no filesystem, environment or arguments, but a real clock and
// real randomness (wazero's defaults would repeat the same "random" bytes in
// every new instance and report a clock stuck in the past).
func TestSandbox(t *testing.T) {
	var rands []string
	for i := 0; i < 2; i++ {
		r := mustRuntime(t, Config{Plugins: []Spec{{Name: "echo", Path: echoWasm(t)}}, Store: openStore(t), Defaults: Limits{PoolSize: 1}})
		res, err := r.Ack(bg, msg("Echo", "sandbox"))
		if err != nil {
			t.Fatal(err)
		}
		var sb struct {
			FS, Dir, RandErr, Rand string
			Env                    []string
			Args, Wall             int
		}
		if err := json.Unmarshal(res.Ops[0].Value, &sb); err != nil {
			t.Fatal(err)
		}
		if sb.FS == "<nil>" || sb.Dir == "<nil>" || len(sb.Env) != 0 || sb.Args != 0 {
			t.Fatalf("guest reached the machine: %+v", sb)
		}
		if sb.RandErr != "<nil>" || sb.Wall != time.Now().Year() {
			t.Fatalf("clock/rand: %+v", sb)
		}
		rands = append(rands, sb.Rand)
	}
	if rands[0] == rands[1] {
		t.Fatalf("two fresh instances drew the same random bytes %s: randomness is not real", rands[0])
	}
}

// Calls, failures (by kind) and latency are exported as metrics.
func TestMetrics(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer mp.Shutdown(bg)
	r := mustRuntime(t, Config{Plugins: []Spec{{Name: "echo", Path: echoWasm(t)}}, MeterProvider: mp, Defaults: Limits{PoolSize: 1}})
	r.Ack(bg, msg("Echo", "ok"))
	r.Ack(bg, msg("Echo", "permanent"))
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(bg, &rm); err != nil {
		t.Fatal(err)
	}
	got := map[string]bool{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			got[m.Name] = true
			if m.Name == "hostd.plugin.failures" {
				dp := m.Data.(metricdata.Sum[int64]).DataPoints[0]
				if k, _ := dp.Attributes.Value("kind"); k.AsString() != "permanent" || dp.Value != 1 {
					t.Fatalf("failures = %+v", dp)
				}
			}
			if m.Name == "hostd.plugin.calls" {
				if dp := m.Data.(metricdata.Sum[int64]).DataPoints[0]; dp.Value != 2 {
					t.Fatalf("calls = %+v", dp)
				}
			}
		}
	}
	for _, n := range []string{"hostd.plugin.calls", "hostd.plugin.failures", "hostd.plugin.call.duration", "hostd.plugin.load.duration"} {
		if !got[n] {
			t.Errorf("metric %s missing (have %v)", n, got)
		}
	}
}

package wasm

import (
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// Attack modules of issue 12 (escape 2): invalid modules whose code names
// the state the rewriter adds. In the abiModule layout the module has no
// globals, so global 0 is the interrupt counter once rewritten, and
// hostd_handle has 3 parameters and no locals, so local 3 is its loop
// counter. Each loop resets the check the rewriter inserted before it.
var (
	// loop: i32.const 0x7fffffff; global.set 0; br 0; end
	counterWriter = modSpec{spin: []byte{0x03, empty, 0x41, 0xff, 0xff, 0xff, 0xff, 0x07, 0x24, 0x00, 0x0c, 0x00, 0x0b}}
	// loop: i32.const 0; local.set 3; br 0; end
	loopLocalWriter = modSpec{spin: []byte{0x03, empty, 0x41, 0x00, 0x21, 0x03, 0x0c, 0x00, 0x0b}}
)

func writeModule(t testing.TB, name string, bin []byte) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name+".wasm")
	if err := os.WriteFile(path, bin, 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// Invalid modules are refused at load, whatever the interrupt setting:
// wazero validates the module before the rewriter reads it, and the
// rewriter itself refuses indices beyond the module's own.
func TestInvalidModulesNamingInjectedStateAreRefused(t *testing.T) {
	for name, m := range map[string]modSpec{"counter-writer": counterWriter, "loop-local-writer": loopLocalWriter} {
		bin := m.build()
		if _, err := instrument(bin); !errors.Is(err, errInstrument) || !strings.Contains(err.Error(), "out of range") {
			t.Errorf("%s: instrument: %v", name, err)
		}
		for _, mode := range modes {
			_, err := newRuntime(t, Config{Plugins: []Spec{{Name: name, Path: writeModule(t, name, bin),
				Limits: Limits{MemoryLimit: 1 << 20, CallTimeout: 200 * time.Millisecond, PoolSize: 1, Interrupt: mode}}}})
			var le *LoadError
			if !errors.As(err, &le) || !errors.Is(err, ErrInvalidModule) || !strings.Contains(err.Error(), "not a valid WebAssembly module") {
				t.Errorf("%s (%s): loaded: %v", name, mode, err)
			}
		}
	}
}

// A module the rewriter does not understand (here: a SIMD instruction,
// which Go never emits) is refused by default, with a message naming the
// setting; the operator may opt in to run it under close-on-context-done,
// where it says why and is still stopped at its timeout.
func TestUninstrumentableModuleNeedsOptIn(t *testing.T) {
	path := writeModule(t, "simd", simdModule())
	_, err := newRuntime(t, Config{Plugins: []Spec{{Name: "simd", Path: path,
		Limits: Limits{MemoryLimit: 1 << 20, PoolSize: 1}}}})
	if !errors.Is(err, ErrInvalidModule) || !strings.Contains(err.Error(), "unsupported opcode 0xfd") ||
		!strings.Contains(err.Error(), "set interrupt: close-on-context-done") {
		t.Fatalf("default: %v", err)
	}
	r := mustRuntime(t, Config{Plugins: []Spec{{Name: "simd", Path: path,
		Limits: Limits{MemoryLimit: 1 << 20, CallTimeout: 150 * time.Millisecond, PoolSize: 1, Interrupt: InterruptCloseOnContext}}}})
	if in := r.List()[0]; in.Interrupt != modeCloseOnDone || !strings.Contains(in.InterruptReason, "configured") {
		t.Fatalf("Info = %+v", in)
	}
	if _, err := r.Ack(bg, msg("Spin", "")); KindOf(err) != KindTimeout {
		t.Fatalf("spin: %v", err)
	}
	if _, err := r.Ack(bg, msg("Quick", "")); err != nil {
		t.Fatal(err)
	}
}

// A module with a start section loads instrumented; its start function
// runs (before _initialize, which checks a global it set).
func TestStartSectionRuns(t *testing.T) {
	a := wasmAsm{}
	start := uint32(5)
	m := modSpec{
		spin: []byte{0x03, empty, 0x0c, 0x00, 0x0b}, quick: nil,
		extraTypes: nil, extraFuncs: []uint32{1},
		extraBodies: [][]byte{a.body(nil, a.i32(1), []byte{0x24, 0x00})}, // global 0 = 1
		globals:     [][]byte{{tI32, 0x01, 0x41, 0x00, 0x0b}},
		start:       &start,
		initCode:    []byte{0x23, 0x00, 0x45, 0x04, empty, 0x00, 0x0b}, // trap unless global 0 != 0
	}
	r := mustRuntime(t, Config{Plugins: []Spec{{Name: "start", Path: writeModule(t, "start", m.build()),
		Limits: Limits{MemoryLimit: 1 << 20, CallTimeout: 150 * time.Millisecond, PoolSize: 1}}}})
	if in := r.List()[0]; in.Interrupt != modeInstrumented {
		t.Fatalf("Info = %+v", in)
	}
	if _, err := r.Ack(bg, msg("Spin", "")); KindOf(err) != KindTimeout {
		t.Fatalf("spin: %v", err)
	}
}

// bulkSpinner loops forever filling 16 MiB of its 32 MiB memory: one
// instruction per iteration that takes milliseconds. Counting iterations
// alone, the rewriter let 16384 of them (tens of seconds) run between two
// exits to Go.
func bulkSpinner() []byte { return bulkSpinnerOf(512, 16<<20) }

// bulkSpinnerOf: a memory of pages pages, filling n bytes per iteration.
func bulkSpinnerOf(pages uint32, n int32) []byte {
	a := wasmAsm{}
	return modSpec{
		memPages: pages,
		// loop: memory.fill(0, 0, n); br 0; end
		spin: a.cat([]byte{0x03, empty}, a.i32(0), a.i32(0), a.i32(n), []byte{0xfc, 0x0b, 0x00, 0x0c, 0x00, 0x0b}),
	}.build()
}

// probe measures the longest delay of a goroutine that wakes every
// millisecond and allocates, the way an HTTP handler answering /healthz
// would notice a frozen daemon (an allocating goroutine waits for a GC
// cycle that cannot finish).
type probe struct {
	worst atomic.Int64
	stop  chan struct{}
	done  chan struct{}
}

var sink []byte

func startProbe() *probe {
	p := &probe{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(p.done)
		t := time.NewTicker(time.Millisecond)
		defer t.Stop()
		last := time.Now()
		for {
			select {
			case <-p.stop:
				return
			case now := <-t.C:
				sink = append(sink[:0], make([]byte, 256<<10)...)
				if d := now.Sub(last); int64(d) > p.worst.Load() {
					p.worst.Store(int64(d))
				}
				last = time.Now()
			}
		}
	}()
	return p
}

func (p *probe) end() time.Duration {
	close(p.stop)
	<-p.done
	return time.Duration(p.worst.Load())
}

// spinDuringGC runs the "Spin" handler of the loaded plugin and forces
// garbage collections while it spins; it returns the longest GC and the
// longest probe delay.
func spinDuringGC(t testing.TB, r *Runtime) (gc, probeWorst time.Duration) {
	t.Helper()
	done := make(chan error, 1)
	go func() {
		_, err := r.Ack(bg, msg("Spin", ""))
		done <- err
	}()
	time.Sleep(100 * time.Millisecond) // let the loop start
	p := startProbe()
	for i := 0; i < 3; i++ {
		start := time.Now()
		runtime.GC()
		gc = max(gc, time.Since(start))
	}
	if err := <-done; KindOf(err) != KindTimeout {
		t.Fatalf("spin: %v", err)
	}
	return gc, p.end()
}

// The last line of defence: however a guest spins, a garbage collection
// (which stops the world, including the watchdog that would stop the
// guest) is not held up longer than the call timeout.
func TestBulkSpinDoesNotStallGC(t *testing.T) {
	const timeout = time.Second
	r := mustRuntime(t, Config{Plugins: []Spec{{Name: "bulk", Path: writeModule(t, "bulk", bulkSpinner()),
		Limits: Limits{MemoryLimit: 64 << 20, CallTimeout: timeout, PoolSize: 1}}}})
	gc, worst := spinDuringGC(t, r)
	t.Logf("during a memory.fill loop: longest GC %v, longest probe delay %v", gc, worst)
	// Generous margin for a loaded machine; before the weights, the GC
	// waited tens of seconds.
	if gc > timeout+3*time.Second || worst > timeout+3*time.Second {
		t.Fatalf("GC %v, probe %v with a %v call timeout", gc, worst, timeout)
	}
}

// TestReportFrozenDaemon (HOSTD_BENCH=1) prints, for each kind of spinning
// guest, the longest GC and the longest latency of an HTTP /healthz probe
// served in the same process while the guest spins and GCs run: the
// frozen-daemon case of issue 12.
func TestReportFrozenDaemon(t *testing.T) {
	if os.Getenv("HOSTD_BENCH") != "1" {
		t.Skip("set HOSTD_BENCH=1 to print the frozen-daemon report")
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write(make([]byte, 64<<10)) // allocates, like a real handler
	}))
	defer srv.Close()
	const timeout = time.Second
	cases := []struct {
		name string
		spec Spec
	}{
		{"go-loop", Spec{Path: faultsWasm(t)}},
		{"memory.fill-loop", Spec{Path: writeModule(t, "bulk", bulkSpinner())}},
		{"loop-free-recursion", Spec{Path: writeModule(t, "rec", recursionModule())}},
		{"counter-writer", Spec{Path: writeModule(t, "cw", counterWriter.build())}},
		{"loop-local-writer", Spec{Path: writeModule(t, "lw", loopLocalWriter.build())}},
	}
	t.Logf("%-22s %-12s %-14s %s", "guest", "longest GC", "/healthz max", "outcome")
	for _, c := range cases {
		c.spec.Name = "spin"
		c.spec.Limits = Limits{MemoryLimit: 64 << 20, CallTimeout: timeout, PoolSize: 1}
		r, err := newRuntime(t, Config{Plugins: []Spec{c.spec}})
		if err != nil {
			t.Logf("%-22s %-12s %-14s refused at load: %.80s", c.name, "-", "-", err)
			continue
		}
		typ := "Spin"
		if c.name == "go-loop" {
			typ = "Loop"
		}
		stop := make(chan struct{})
		worst := make(chan time.Duration)
		go func() {
			var w time.Duration
			for {
				select {
				case <-stop:
					worst <- w
					return
				case <-time.After(10 * time.Millisecond):
				}
				s := time.Now()
				if resp, err := http.Get(srv.URL + "/healthz"); err == nil {
					_, _ = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
				}
				w = max(w, time.Since(s))
			}
		}()
		done := make(chan error, 1)
		start := time.Now()
		go func() {
			_, err := r.Ack(bg, msg(typ, "loop"))
			done <- err
		}()
		time.Sleep(100 * time.Millisecond)
		var gc time.Duration
		for i := 0; i < 3; i++ {
			s := time.Now()
			runtime.GC()
			gc = max(gc, time.Since(s))
		}
		err = <-done
		took := time.Since(start)
		close(stop)
		t.Logf("%-22s %-12v %-14v %s after %v", c.name, gc.Round(time.Millisecond), (<-worst).Round(time.Millisecond), KindOf(err), took.Round(time.Millisecond))
		r.Close()
	}
}

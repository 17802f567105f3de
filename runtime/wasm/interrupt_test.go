package wasm

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/hostd-dev/hostd/internal/wasmtest"
	"github.com/hostd-dev/hostd/runtime/catalog"
	"github.com/hostd-dev/hostd/sdk/abi"
)

// modes are the two ways of stopping a guest; most tests here run in both.
var modes = []string{InterruptAuto, InterruptCloseOnContext}

func wantMode(setting string) string {
	if setting == InterruptCloseOnContext {
		return modeCloseOnDone
	}
	return modeInstrumented
}

// Go plugins are instrumented by default and say so in List; the setting
// forces the old mode.
func TestInterruptModeIsReported(t *testing.T) {
	for _, m := range modes {
		r := mustRuntime(t, Config{Plugins: []Spec{{Name: "echo", Path: echoWasm(t), Limits: Limits{Interrupt: m}}},
			Defaults: Limits{PoolSize: 1}})
		in := r.List()[0]
		if in.Interrupt != wantMode(m) {
			t.Fatalf("%s: Interrupt = %q (%s)", m, in.Interrupt, in.InterruptReason)
		}
		if (in.InterruptReason == "") != (m == InterruptAuto) {
			t.Fatalf("%s: InterruptReason = %q", m, in.InterruptReason)
		}
	}
}

// An endless loop, a loop-free recursion and a guest stuck in a blocking
// host call all end at the call timeout in both modes, with a timeout
// error, and the plugin keeps working.
func TestTimeoutsInBothModes(t *testing.T) {
	const timeout = 200 * time.Millisecond
	// Generous: the machine may be loaded (2 cores, -race, other
	// packages' tests); a guest that cannot be stopped would run forever.
	const margin = 3 * time.Second
	stuck := &stuckStore{Store: openStore(t)}
	for _, m := range modes {
		t.Run(m, func(t *testing.T) {
			r := mustRuntime(t, Config{Store: stuck, Plugins: []Spec{{Name: "faults", Path: faultsWasm(t),
				Limits: Limits{CallTimeout: timeout, PoolSize: 1, Interrupt: m}}}})
			if got := r.List()[0].Interrupt; got != wantMode(m) {
				t.Fatalf("mode %q", got)
			}
			for _, c := range []struct{ typ, payload string }{
				{"Loop", "loop"}, {"Recurse", "recurse"}, {"Stuck", "stuck"},
			} {
				start := time.Now()
				_, err := r.Ack(bg, msg(c.typ, c.payload))
				took := time.Since(start)
				if KindOf(err) != KindTimeout || !strings.Contains(err.Error(), "call exceeded the 200ms call timeout") {
					t.Fatalf("%s: %v", c.typ, err)
				}
				if took < timeout || took > timeout+margin {
					t.Fatalf("%s: stopped after %v with a %v timeout", c.typ, took, timeout)
				}
				t.Logf("%s: stopped after %v", c.typ, took)
				if _, err := r.Ack(bg, msg("Loop", "ok")); err != nil {
					t.Fatalf("call after %s: %v", c.typ, err)
				}
			}
			// The caller's own cancellation stops the guest too.
			ctx, cancel := context.WithCancel(bg)
			time.AfterFunc(50*time.Millisecond, cancel)
			if _, err := r.Ack(ctx, msg("Loop", "loop")); KindOf(err) != KindCanceled {
				t.Fatalf("canceled: %v", err)
			}
		})
	}
}

// stuckStore is a fault: reads of key "stuck" block until the context
// ends.
type stuckStore struct{ catalog.Store }

func (s *stuckStore) View(ctx context.Context, fn func(catalog.Reader) error) error {
	return s.Store.View(ctx, func(r catalog.Reader) error {
		return fn(stuckReader{ctx, r})
	})
}

type stuckReader struct {
	ctx context.Context
	catalog.Reader
}

func (r stuckReader) Get(key []byte) ([]byte, catalog.Version, error) {
	if strings.HasSuffix(string(key), "/stuck") {
		<-r.ctx.Done()
		return nil, 0, r.ctx.Err()
	}
	return r.Reader.Get(key)
}

// A guest spinning in a loop cannot be preempted by the Go scheduler; the
// watchdog's yields let a garbage collection's stop-the-world through long
// before the call timeout.
func TestSpinningGuestDoesNotBlockGC(t *testing.T) {
	r := mustRuntime(t, Config{Plugins: []Spec{{Name: "faults", Path: faultsWasm(t),
		Limits: Limits{CallTimeout: time.Minute, PoolSize: 1}}}})
	ctx, cancel := context.WithCancel(bg)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		_, err := r.Ack(ctx, msg("Loop", "loop"))
		done <- err
	}()
	time.Sleep(100 * time.Millisecond) // let the loop start
	start := time.Now()
	runtime.GC()
	gc := time.Since(start)
	cancel()
	if err := <-done; KindOf(err) != KindCanceled {
		t.Fatalf("loop: %v", err)
	}
	t.Logf("GC during a guest loop took %v", gc)
	if gc > 20*time.Second {
		t.Fatalf("GC waited %v for the spinning guest", gc)
	}
}

// A module without loops whose recursion never ends is stopped by the
// check at function entry. (wazero's close-on-context-done checks only at
// loop headers: it cannot stop this guest at all, nor let a garbage
// collection through while it runs.)
func TestLoopFreeRecursionTimesOut(t *testing.T) {
	path := filepath.Join(t.TempDir(), "recurse.wasm")
	if err := os.WriteFile(path, recursionModule(), 0o644); err != nil {
		t.Fatal(err)
	}
	r := mustRuntime(t, Config{Plugins: []Spec{{Name: "recurse", Path: path,
		Limits: Limits{MemoryLimit: 1 << 20, CallTimeout: 150 * time.Millisecond, PoolSize: 1}}}})
	if in := r.List()[0]; in.Interrupt != modeInstrumented {
		t.Fatalf("mode %q: %s", in.Interrupt, in.InterruptReason)
	}
	start := time.Now()
	if _, err := r.Ack(bg, msg("Spin", "")); KindOf(err) != KindTimeout {
		t.Fatal(err)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Fatalf("stopped after %v", took)
	}
	if _, err := r.Ack(bg, msg("Quick", "")); err != nil {
		t.Fatal(err)
	}
}

// The first-party plugins and the test plugins give the same results
// instrumented and not.
func TestSameResultsInBothModes(t *testing.T) {
	collections := wasmtest.Build(t, filepath.Join(wasmtest.Root(), "plugins", "collections"))
	spread := wasmtest.Build(t, filepath.Join(wasmtest.Root(), "plugins", "zone-spread"))
	type outcome struct {
		Validate, Ack string
		Ops           []string
		Keys          []abi.ResourceKey
		Policy        abi.PolicyOutput
	}
	results := map[string][]outcome{}
	for _, m := range modes {
		store := openStore(t)
		r := mustRuntime(t, Config{Store: store, Defaults: Limits{PoolSize: 1, Interrupt: m}, Plugins: []Spec{
			{Name: "collections", Path: collections},
			{Name: "zone-spread", Path: spread, Config: map[string]string{"label": "zone"}},
			{Name: "echo", Path: echoWasm(t)},
		}})
		for _, in := range r.List() {
			if in.Interrupt != wantMode(m) {
				t.Fatalf("%s: %s runs %q", m, in.Name, in.Interrupt)
			}
		}
		errString := func(err error) string {
			if err == nil {
				return "ok"
			}
			return err.Error()
		}
		var outs []outcome
		for _, s := range []struct{ typ, payload string }{
			{"CreateCollection", `{"db":"shop","name":"orders"}`},
			{"CreateDatabase", `{"name":"shop"}`},
			{"CreateDatabase", `{"name":"shop"}`},
			{"CreateCollection", `{"db":"shop","name":"orders","shards":4}`},
			{"RenameCollection", `{"db":"shop","name":"orders","new_name":"o2"}`},
			{"DropCollection", `{"db":"shop","name":"ghost"}`},
			{"DropCollection", `{"db":"shop","name":"o2"}`},
			{"CreateDatabase", `not json`},
			{"Echo", "hello"},
		} {
			mm := msg(s.typ, s.payload)
			var o outcome
			o.Validate = errString(r.Validate(bg, mm, nil))
			res, err := r.Ack(bg, mm)
			o.Ack = errString(err)
			if err == nil {
				for _, op := range res.Ops {
					o.Ops = append(o.Ops, fmt.Sprintf("%s=%s del=%v", op.Key, op.Value, op.Delete))
				}
				if err := commit(bg, store, res); err != nil {
					t.Fatal(err)
				}
			}
			if h, _ := r.Lookup(s.typ); h.ResourceKeys {
				o.Keys, err = r.ResourceKeys(bg, mm)
				if err != nil {
					o.Ack += "; keys: " + err.Error()
				}
			}
			outs = append(outs, o)
		}
		for _, q := range []uint32{1, 7, 64} {
			in := &abi.PolicyInput{Operation: "create", Topic: "t", Queues: q, Brokers: []abi.Broker{
				{Name: "a1", Labels: map[string]string{"zone": "a"}}, {Name: "a2", Labels: map[string]string{"zone": "a"}},
				{Name: "b1", Labels: map[string]string{"zone": "b"}}, {Name: "c1", Labels: map[string]string{"zone": "c"}, Load: 3},
			}}
			out, err := r.Policy(bg, "zone-spread", in)
			outs = append(outs, outcome{Policy: out, Ack: errString(err)})
		}
		results[m] = outs
	}
	if d := cmp.Diff(results[InterruptCloseOnContext], results[InterruptAuto]); d != "" {
		t.Fatalf("instrumented results differ (-close-on-context-done +instrumented):\n%s", d)
	}
	if n := len(results[InterruptAuto]); n != 12 || results[InterruptAuto][1].Ack != "ok" || len(results[InterruptAuto][1].Ops) == 0 {
		t.Fatalf("unexpected outcomes: %+v", results[InterruptAuto])
	}
}

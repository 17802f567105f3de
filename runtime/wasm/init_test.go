package wasm

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hostd-dev/hostd/internal/wasmtest"
)

// Modules that never finish starting (issue 12, "also found"): a loop in
// _initialize, or in the start function.
func initLoopModule() []byte {
	return modSpec{initCode: []byte{0x03, empty, 0x0c, 0x00, 0x0b}}.build()
}

func startLoopModule() []byte {
	a := wasmAsm{}
	start := uint32(5)
	return modSpec{extraFuncs: []uint32{1}, start: &start,
		extraBodies: [][]byte{a.body(nil, []byte{0x03, empty, 0x0c, 0x00, 0x0b})}}.build()
}

// A plugin that does not start within plugins.init_timeout fails to load
// with ErrInitTimeout, named in its LoadError, soon after the timeout;
// other plugins load.
func TestInitTimeout(t *testing.T) {
	const timeout = 300 * time.Millisecond
	for _, c := range []struct {
		name, mode string
		bin        []byte
		step       string
	}{
		{"init-loop", InterruptAuto, initLoopModule(), "_initialize"},
		{"start-loop", InterruptAuto, startLoopModule(), "start function"},
		{"start-loop-plain", InterruptCloseOnContext, startLoopModule(), "instantiate"},
	} {
		t.Run(c.name, func(t *testing.T) {
			start := time.Now()
			r, err := newRuntime(t, Config{Defaults: Limits{InitTimeout: timeout, PoolSize: 1}, Plugins: []Spec{
				{Name: c.name, Path: writeModule(t, c.name, c.bin), Limits: Limits{MemoryLimit: 1 << 20, Interrupt: c.mode}},
				{Name: "echo", Path: echoWasm(t), Limits: Limits{InitTimeout: 2 * time.Minute}},
			}})
			took := time.Since(start)
			var le *LoadError
			if !errors.As(err, &le) || le.Plugin != c.name || !errors.Is(err, ErrInitTimeout) ||
				!strings.Contains(err.Error(), c.step+" did not return within the 300ms init timeout") {
				t.Fatalf("load: %v", err)
			}
			// Generous for a loaded machine; it used to take 30 s.
			if took > timeout+15*time.Second {
				t.Fatalf("load took %v", took)
			}
			if _, ok := r.Lookup("Echo"); !ok {
				t.Fatal("the other plugin did not load")
			}
			if in := r.List(); len(in) != 2 || !strings.Contains(in[1].Error, "init timeout") {
				t.Fatalf("List = %+v", in)
			}
		})
	}
}

// A reload is bounded by the init timeout and by its context.
func TestReloadIsBounded(t *testing.T) {
	dir := t.TempDir()
	copyTo(t, echoWasm(t), dir, "p.wasm")
	r := mustRuntime(t, Config{Dir: dir, Defaults: Limits{PoolSize: 1, MemoryLimit: 4 << 20, InitTimeout: 2 * time.Minute}})
	if err := os.WriteFile(filepath.Join(dir, "p.wasm"), initLoopModule(), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(bg, 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	err := r.Reload(ctx)
	if took := time.Since(start); took > 15*time.Second || !strings.Contains(err.Error(), "canceled") {
		t.Fatalf("reload: %v after %v", err, took)
	}
	if _, err := r.Ack(bg, msg("Echo", "ok")); err != nil {
		t.Fatalf("the old version should still serve: %v", err)
	}
}

// Closing the runtime ends a call whose guest is blocked in a host call
// (a KV read that waits for its context), in both interrupt modes.
func TestCloseEndsBlockedHostCall(t *testing.T) {
	for _, m := range modes {
		t.Run(m, func(t *testing.T) {
			r, err := New(bg, Config{CacheDir: wasmtest.CacheDir(), Logger: slog.New(slog.DiscardHandler), Store: &stuckStore{Store: openStore(t)},
				Defaults: Limits{InitTimeout: 2 * time.Minute},
				Plugins:  []Spec{{Name: "faults", Path: faultsWasm(t), Limits: Limits{CallTimeout: time.Hour, PoolSize: 1, Interrupt: m}}}})
			if err != nil {
				t.Fatal(err)
			}
			done := make(chan error, 1)
			go func() {
				_, err := r.Ack(bg, msg("Stuck", "stuck"))
				done <- err
			}()
			time.Sleep(200 * time.Millisecond) // let it block
			start := time.Now()
			if err := r.Close(); err != nil {
				t.Fatal(err)
			}
			select {
			case err := <-done:
				if KindOf(err) != KindUnavailable {
					t.Fatalf("blocked call: %v", err)
				}
			case <-time.After(30 * time.Second):
				t.Fatal("the blocked call did not end after Close")
			}
			t.Logf("ended %v after Close", time.Since(start))
		})
	}
}

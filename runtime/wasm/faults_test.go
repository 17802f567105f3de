package wasm

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hostd-dev/hostd/internal/wasmtest"
)

// An endless loop is stopped at the call timeout, other calls proceed
// meanwhile, and the next call on the plugin works.
func TestEndlessLoopTimesOut(t *testing.T) {
	r := mustRuntime(t, Config{
		Plugins: []Spec{
			{Name: "faults", Path: faultsWasm(t), Limits: Limits{CallTimeout: 100 * time.Millisecond, PoolSize: 2}},
			{Name: "echo", Path: echoWasm(t)},
		},
		Defaults: Limits{PoolSize: 1},
	})
	done := make(chan error, 1)
	start := time.Now()
	var took time.Duration
	go func() {
		_, err := r.Ack(bg, msg("Loop", "loop"))
		took = time.Since(start)
		done <- err
	}()
	// While the loop spins, other calls (same plugin, other instance; and
	// another plugin) are served.
	time.Sleep(20 * time.Millisecond)
	if _, err := r.Ack(bg, msg("Echo", "ok")); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Ack(bg, msg("Loop", "ok")); err != nil {
		t.Fatal(err)
	}
	err := <-done
	if KindOf(err) != KindTimeout || !strings.Contains(err.Error(), "plugin faults") {
		t.Fatalf("loop: %v", err)
	}
	t.Logf("endless loop stopped after %v", took)
	// Bounded loosely: timers and goroutines run late on a loaded
	// machine under -race; a loop that were not interrupted never ends.
	if took > 3*time.Second {
		t.Fatalf("loop took %v to stop with a 100ms timeout", took)
	}
	for i := 0; i < 10; i++ {
		if _, err := r.Ack(bg, msg("Loop", "ok")); err != nil {
			t.Fatalf("call after timeout: %v", err)
		}
	}
	// A caller's own cancellation is reported as such.
	ctx, cancel := context.WithTimeout(bg, 30*time.Millisecond)
	defer cancel()
	if _, err := r.Ack(ctx, msg("Loop", "loop")); KindOf(err) != KindCanceled {
		t.Fatalf("canceled: %v", err)
	}
}

// Trap, panic and OOM: the error names the plugin and carries the guest's
// message; the instance is replaced and many further calls succeed.
func TestCrashesReplaceTheInstance(t *testing.T) {
	r := mustRuntime(t, Config{Plugins: []Spec{{Name: "faults", Path: faultsWasm(t),
		Limits: Limits{PoolSize: 2, MemoryLimit: 16 << 20, CallTimeout: 20 * time.Second}}}})
	cases := []struct {
		typ, payload string
		kind         ErrorKind
		want         string
	}{
		{"Trap", "trap", KindTrap, "out of bounds memory access"},
		{"Panic", "panic", KindPanic, "boom: the guest panicked"},
		{"OOM", "oom", KindOOM, "out of memory"},
	}
	for _, c := range cases {
		t.Run(c.typ, func(t *testing.T) {
			_, err := r.Ack(bg, msg(c.typ, c.payload))
			if KindOf(err) != c.kind || !strings.Contains(err.Error(), "plugin faults") || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error = %v, want kind %s with %q", err, c.kind, c.want)
			}
			if IsPermanent(err) {
				t.Fatalf("%s reported permanent", c.kind)
			}
			n := 1000
			if testing.Short() || raceEnabled {
				n = 100 // -race makes each instantiation ~20x slower
			}
			for i := 0; i < n; i++ {
				if _, err := r.Ack(bg, msg(c.typ, "ok")); err != nil {
					t.Fatalf("call %d after %s: %v", i, c.kind, err)
				}
			}
		})
	}
	deadline := time.Now().Add(30 * time.Second) // refills start instances: slow under -race and load
	for r.List()[0].Live != 2 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if l := r.List()[0]; l.Failures != 3 || l.Live != 2 {
		t.Fatalf("List = %+v", l)
	}
}

func TestOversizedOutputIsRejected(t *testing.T) {
	r := mustRuntime(t, Config{Plugins: []Spec{{Name: "faults", Path: faultsWasm(t), Limits: Limits{MaxOutput: 64 << 10}}},
		Defaults: Limits{PoolSize: 1}})
	_, err := r.ResourceKeys(bg, msg("BigOut", "big"))
	if KindOf(err) != KindBadOutput || !IsPermanent(err) || !strings.Contains(err.Error(), "exceeds the limit") {
		t.Fatalf("big output: %v", err)
	}
	if keys, err := r.ResourceKeys(bg, msg("BigOut", "small")); err != nil || len(keys) != 1 {
		t.Fatalf("small output: %v %v", keys, err)
	}
}

// A broken file is reported by name with what is wrong; the other plugins
// load and work.
func TestBadModulesDoNotStopOthers(t *testing.T) {
	dir := t.TempDir()
	copyTo(t, echoWasm(t), dir, "echo.wasm")
	copyTo(t, wasmtest.Build(t, "testdata/wrongabi"), dir, "wrongabi.wasm")
	if err := os.WriteFile(filepath.Join(dir, "garbage.wasm"), []byte("\x00asm\x01\x00\x00\x00garbage"), 0o644); err != nil {
		t.Fatal(err)
	}
	r, err := newRuntime(t, Config{Dir: dir, Defaults: Limits{PoolSize: 1}})
	if r == nil {
		t.Fatal(err)
	}
	var les []*LoadError
	for _, e := range err.(interface{ Unwrap() []error }).Unwrap() {
		var le *LoadError
		if errors.As(e, &le) {
			les = append(les, le)
		}
	}
	if len(les) != 2 {
		t.Fatalf("load errors = %v", err)
	}
	msgs := err.Error()
	for _, want := range []string{
		"garbage.wasm", "not a valid WebAssembly module",
		"wrongabi.wasm", "hostd.teleport, which ABI v1 does not offer", "exports hostd_abi_v0, but this hostd speaks ABI v1",
		"missing export hostd_alloc", "missing export hostd_handle",
	} {
		if !strings.Contains(msgs, want) {
			t.Errorf("load error lacks %q:\n%s", want, msgs)
		}
	}
	if !errors.Is(err, ErrInvalidModule) {
		t.Error("not ErrInvalidModule")
	}
	if _, err := r.Ack(bg, msg("Echo", "ok")); err != nil {
		t.Fatal(err)
	}
	l := r.List()
	if len(l) != 3 || l[1].Name != "garbage" || l[1].Error == "" || l[0].Error != "" {
		t.Fatalf("List = %+v", l)
	}
}

func TestTwoPluginsClaimingOneType(t *testing.T) {
	dir := t.TempDir()
	copyTo(t, echoWasm(t), dir, "echo.wasm")
	copyTo(t, echoWasm(t), dir, "echo2.wasm")
	r, err := newRuntime(t, Config{Dir: dir, Defaults: Limits{PoolSize: 1}})
	if err == nil || !strings.Contains(err.Error(), `message type "Echo" is claimed by both plugin echo and plugin echo2`) {
		t.Fatalf("err = %v", err)
	}
	if h, _ := r.Lookup("Echo"); h.Plugin != "echo" {
		t.Fatalf("Echo served by %q", h.Plugin)
	}
}

func TestReloadSwapsAndFinishesInFlight(t *testing.T) {
	dir := t.TempDir()
	copyTo(t, echoWasm(t), dir, "echo.wasm")
	inUse := map[string]bool{}
	var mu sync.Mutex
	r := mustRuntime(t, Config{Dir: dir, Defaults: Limits{PoolSize: 1},
		InUse: func(m string) bool { mu.Lock(); defer mu.Unlock(); return inUse[m] }})
	before := r.List()[0]

	// A call in flight during the reload finishes on the old version.
	done := make(chan error, 1)
	go func() {
		_, err := r.Ack(bg, msg("Echo", "busy 300"))
		done <- err
	}()
	time.Sleep(50 * time.Millisecond)
	copyTo(t, faultsWasm(t), dir, "faults.wasm")
	copyTo(t, echoWasm(t), dir, "echo.wasm") // unchanged: keeps its version
	if err := r.Reload(bg); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatalf("in-flight call: %v", err)
	}
	if _, ok := r.Lookup("Trap"); !ok {
		t.Fatal("new plugin not loaded")
	}
	if after := r.List()[0]; after.SHA256 != before.SHA256 || after.LoadedAt != before.LoadedAt {
		t.Fatal("unchanged plugin was reloaded")
	}

	// Replacing echo's file with other code makes a new version.
	copyTo(t, wasmtest.Build(t, "testdata/echo2"), dir, "echo.wasm")
	go func() {
		_, err := r.Ack(bg, msg("Echo", "busy 300"))
		done <- err
	}()
	time.Sleep(50 * time.Millisecond)
	if err := r.Reload(bg); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatalf("in-flight call across a swap: %v", err)
	}
	if _, err := r.Ack(bg, msg("Echo", "version")); err != nil {
		t.Fatalf("new version: %v", err)
	}

	// Removing a type that pending work needs is refused; nothing changes.
	mu.Lock()
	inUse["Trap"] = true
	mu.Unlock()
	os.Remove(filepath.Join(dir, "faults.wasm"))
	err := r.Reload(bg)
	if !errors.Is(err, ErrInUse) || !strings.Contains(err.Error(), "Trap") {
		t.Fatalf("reload removing an in-use type: %v", err)
	}
	if _, ok := r.Lookup("Trap"); !ok {
		t.Fatal("refused reload changed the routes")
	}
	mu.Lock()
	inUse["Trap"] = false
	mu.Unlock()
	if err := r.Reload(bg); err != nil {
		t.Fatal(err)
	}
	if _, ok := r.Lookup("Trap"); ok {
		t.Fatal("removed plugin still routed")
	}

	// A broken new file keeps the running version.
	if err := os.WriteFile(filepath.Join(dir, "echo.wasm"), []byte("junk"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := r.Reload(bg); err == nil || !strings.Contains(err.Error(), "echo.wasm") {
		t.Fatalf("broken reload: %v", err)
	}
	if _, err := r.Ack(bg, msg("Echo", "version")); err != nil {
		t.Fatalf("old version after a failed reload: %v", err)
	}
}

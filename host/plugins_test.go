package host

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hostd-dev/hostd/client"
	"github.com/hostd-dev/hostd/host/config"
	"github.com/hostd-dev/hostd/internal/wasmtest"
	"github.com/hostd-dev/hostd/sdk/abi"
)

func copyPlugin(t *testing.T, src, dir, name string) {
	t.Helper()
	b, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// The plugin operator surface through the real daemon: a plugin in
// <data.dir>/plugins is loaded, its ack callback runs for a broadcast and
// its KV effect is committed with the task, operators list, read KV and
// reload (a broken file is reported, the others keep working), and the API
// answers while a plugin spins in an endless loop.
func TestPluginsThroughTheDaemon(t *testing.T) {
	echo := wasmtest.Build(t, "../runtime/wasm/testdata/echo")
	faults := wasmtest.Build(t, "../runtime/wasm/testdata/faults")
	cfg := testConfig(t)
	cfg.Plugins.PoolSize = 2
	// Short enough for the endless loop below, long enough that the
	// Counter callbacks never hit it on a loaded machine under -race.
	cfg.Plugins.CallTimeout = time.Second
	// The reload below compiles faults.wasm inside the API request: under
	// -race on a loaded machine that took longer than the default 30s
	// request deadline (_initialize: context deadline exceeded).
	cfg.API.RequestTimeout = 5 * time.Minute
	cfg.Broadcast.Vchannels = []string{"t/0"}
	pdir := filepath.Join(cfg.Data.Dir, "plugins")
	copyPlugin(t, echo, pdir, "echo.wasm")
	// Share the test binary's compilation cache (a cold compile is ~2s).
	if err := os.Symlink(wasmtest.CacheDir(), filepath.Join(cfg.Data.Dir, "wasm-cache")); err != nil {
		t.Fatal(err)
	}
	h := startHost(t, cfg)
	c, err := client.New(h.URL())
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()

	l, err := c.ListPlugins(ctx, client.Page{})
	if err != nil || len(l.Items) != 1 || l.Items[0].Name != "echo" || l.Items[0].ABI != 1 || len(l.Items[0].SHA256) != 64 {
		t.Fatalf("ListPlugins = %+v, %v", l, err)
	}

	// A broadcast of a plugin's message type runs its ack callback, whose
	// KV write is committed with the task.
	for i := 0; i < 3; i++ {
		res, err := c.SubmitBroadcast(ctx, &client.BroadcastRequest{Type: "Counter", VChannels: []string{"t/0"}})
		if err != nil || res.State != "TOMBSTONE" {
			t.Fatalf("broadcast: %+v %v", res, err)
		}
	}
	kv, err := c.GetPluginKV(ctx, "echo", "n")
	if err != nil || kv.ValueText == nil || *kv.ValueText != "3" || kv.Version == 0 {
		t.Fatalf("GetPluginKV = %+v, %v", kv, err)
	}
	if _, err := c.GetPluginKV(ctx, "echo", "missing"); !client.IsNotFound(err) {
		t.Fatalf("missing key: %v", err)
	}
	scan, err := c.ScanPluginKV(ctx, "echo", "", client.Page{})
	if err != nil || len(scan.Items) != 1 || scan.Items[0].Key != "n" {
		t.Fatalf("ScanPluginKV = %+v, %v", scan, err)
	}
	if _, err := c.ScanPluginKV(ctx, "Bad Name", "", client.Page{}); !client.HasCode(err, "invalid_argument") {
		t.Fatalf("bad name: %v", err)
	}

	// Reload picks up a new plugin and reports a broken one by file.
	copyPlugin(t, faults, pdir, "faults.wasm")
	if err := os.WriteFile(filepath.Join(pdir, "broken.wasm"), []byte("not wasm"), 0o644); err != nil {
		t.Fatal(err)
	}
	rl, err := c.ReloadPlugins(ctx)
	if err != nil || len(rl.Items) != 3 || len(rl.Errors) != 1 || !strings.Contains(rl.Errors[0].Path, "broken.wasm") {
		t.Fatalf("ReloadPlugins = %+v, %v", rl, err)
	}

	// An endless loop is cut at the 1s call timeout; the API answers
	// meanwhile.
	done := make(chan error, 1)
	start := time.Now()
	go func() {
		_, err := h.plugins.Ack(ctx, &abi.Message{Type: "Loop", Payload: []byte("loop")})
		done <- err
	}()
	for i := 0; i < 5; i++ {
		if _, err := c.ListPlugins(ctx, client.Page{}); err != nil {
			t.Fatal(err)
		}
	}
	if err := <-done; err == nil || !strings.Contains(err.Error(), "timeout") {
		t.Fatalf("loop: %v", err)
	}
	if d := time.Since(start); d > 15*time.Second { // loose: timers run late under load
		t.Fatalf("loop took %v", d)
	}
	if _, err := h.plugins.Ack(ctx, &abi.Message{Type: "Loop", Payload: []byte("ok")}); err != nil {
		t.Fatalf("call after the timeout: %v", err)
	}
}

// TestPluginInterruptSetting: plugins.list[].interrupt reaches the runtime:
// the default rewrites the module (instrumented), close-on-context-done
// keeps it unmodified, and both are shown by the API.
func TestPluginInterruptSetting(t *testing.T) {
	echo := wasmtest.Build(t, "../runtime/wasm/testdata/echo")
	faults := wasmtest.Build(t, "../runtime/wasm/testdata/faults")
	cfg := testConfig(t)
	cfg.API.RequestTimeout = 5 * time.Minute
	cfg.Plugins.List = []config.Plugin{
		{Name: "fast", Path: echo},
		{Name: "plain", Path: faults, Interrupt: "close-on-context-done"},
	}
	if err := os.Symlink(wasmtest.CacheDir(), filepath.Join(cfg.Data.Dir, "wasm-cache")); err != nil {
		t.Fatal(err)
	}
	h := startHost(t, cfg)
	c, err := client.New(h.URL())
	if err != nil {
		t.Fatal(err)
	}
	l, err := c.ListPlugins(context.Background(), client.Page{})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, p := range l.Items {
		got[p.Name] = p.Interrupt
		if p.Name == "plain" && !strings.Contains(p.InterruptReason, "configured") {
			t.Errorf("plain: interrupt reason %q does not say it was configured", p.InterruptReason)
		}
	}
	if got["fast"] != "instrumented" || got["plain"] != "close-on-context-done" {
		t.Fatalf("interrupt modes %v", got)
	}
}

// A plugin whose initialization never returns: the API serves while the
// plugins load (/healthz at once, /readyz waiting for "plugins"), the
// plugin fails to load after plugins.init_timeout with an init-timeout
// error naming it, and hostd then becomes ready without it.
func TestPluginInitTimeoutDoesNotBlockTheAPI(t *testing.T) {
	loop := wasmtest.Build(t, "testdata/initloop")
	echo := wasmtest.Build(t, "../runtime/wasm/testdata/echo")
	cfg := testConfig(t)
	cfg.Plugins.PoolSize = 1
	cfg.Plugins.InitTimeout = 3 * time.Second
	pdir := filepath.Join(cfg.Data.Dir, "plugins")
	copyPlugin(t, loop, pdir, "initloop.wasm")
	copyPlugin(t, echo, pdir, "echo.wasm")
	if err := os.Symlink(wasmtest.CacheDir(), filepath.Join(cfg.Data.Dir, "wasm-cache")); err != nil {
		t.Fatal(err)
	}
	h, err := Open(context.Background(), cfg, Options{Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = h.Shutdown(context.Background()) })
	started := make(chan error, 1)
	begin := time.Now()
	go func() { started <- h.Start(context.Background()) }()
	var url string
	for url == "" {
		select {
		case err := <-started:
			t.Fatalf("Start returned before the plugin's init timeout: %v", err)
		case <-time.After(5 * time.Millisecond):
		}
		url = h.URL()
	}
	c, err := client.New(url)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := c.Health(ctx); err != nil {
		t.Fatalf("healthz while plugins load: %v", err)
	}
	err = c.Ready(ctx)
	var ce *client.Error
	if !errors.As(err, &ce) || !strings.Contains(fmt.Sprint(ce.Details["waiting"]), "plugins") {
		t.Fatalf("readyz while plugins load: %v", err)
	}
	if healthy := time.Since(begin); healthy > cfg.Plugins.InitTimeout {
		t.Logf("note: the API answered only after %v", healthy)
	}
	if err := <-started; err != nil {
		t.Fatal(err)
	}
	t.Logf("started in %v", time.Since(begin))
	if err := c.Ready(ctx); err != nil {
		t.Fatalf("readyz after the load: %v", err)
	}
	l, err := c.ListPlugins(ctx, client.Page{})
	if err != nil {
		t.Fatal(err)
	}
	var loopErr string
	for _, p := range l.Items {
		if p.Name == "initloop" {
			loopErr = p.Error
		}
	}
	if !strings.Contains(loopErr, "plugin initloop") || !strings.Contains(loopErr, "did not return within the 3s init timeout") {
		t.Fatalf("initloop error %q", loopErr)
	}
	if _, err := h.plugins.Ack(ctx, &abi.Message{Type: "Echo", Payload: []byte("ok")}); err != nil {
		t.Fatalf("the other plugin: %v", err)
	}
}

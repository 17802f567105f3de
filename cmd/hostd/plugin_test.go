package main

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hostd-dev/hostd/client"
	"github.com/hostd-dev/hostd/internal/wasmtest"
	"github.com/hostd-dev/hostd/wire"
)

// The operator's plugin commands against a real daemon subprocess: ls, kv
// get/scan after a broadcast ran the plugin's callback, SIGHUP and
// `plugin reload` (a broken file: exit 1 naming it).
func TestPluginOperatorCLI(t *testing.T) {
	echo := wasmtest.Build(t, "../../runtime/wasm/testdata/echo")
	faults := wasmtest.Build(t, "../../runtime/wasm/testdata/faults")
	dir := t.TempDir()
	pdir := filepath.Join(dir, "data", "plugins")
	if err := os.MkdirAll(pdir, 0o755); err != nil {
		t.Fatal(err)
	}
	cp := func(src, name string) {
		b, err := os.ReadFile(src)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(pdir, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	cp(echo, "echo.wasm")
	// Share the tests' compilation cache (a cold compile is ~2s).
	if err := os.Symlink(wasmtest.CacheDir(), filepath.Join(dir, "data", "wasm-cache")); err != nil {
		t.Fatal(err)
	}
	d := startDaemon(t, dir, "--listen", "127.0.0.1:0", "--data-dir", "data")
	addr := []string{"--addr", d.addr}

	out, _, code := runCLI(t, dir, append([]string{"plugin", "ls"}, addr...)...)
	if code != 0 || !strings.Contains(out, "echo") || !strings.Contains(out, "ack:Echo") || !strings.Contains(out, "v1") {
		t.Fatalf("plugin ls: %d\n%s", code, out)
	}
	if _, errOut, code := runCLI(t, dir, append([]string{"broadcast", "send", "Counter"}, addr...)...); code != 0 {
		t.Fatalf("broadcast: %d %s", code, errOut)
	}
	out, _, code = runCLI(t, dir, append([]string{"plugin", "kv", "get", "echo", "n"}, addr...)...)
	if code != 0 || strings.TrimSpace(out) != "1" {
		t.Fatalf("kv get: %d %q", code, out)
	}
	var kvs []client.PluginKV
	cliJSON(t, dir, &kvs, append([]string{"plugin", "kv", "scan", "echo"}, addr...)...)
	if len(kvs) != 1 || kvs[0].Key != "n" {
		t.Fatalf("kv scan: %+v", kvs)
	}
	if _, errOut, code := runCLI(t, dir, append([]string{"plugin", "kv", "get", "echo", "nope"}, addr...)...); code != 1 || !strings.Contains(errOut, "not_found") {
		t.Fatalf("kv get missing: %d %s", code, errOut)
	}

	// SIGHUP reloads.
	cp(faults, "faults.wasm")
	if err := d.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(3 * time.Minute) // a cold compile of faults, on a loaded machine
	for {
		out, _, _ = runCLI(t, dir, append([]string{"plugin", "ls"}, addr...)...)
		if strings.Contains(out, "faults") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("SIGHUP did not load faults:\n%s\n%s", out, d.Logs())
		}
		time.Sleep(100 * time.Millisecond)
	}

	// plugin reload reports a broken file and exits 1.
	if err := os.WriteFile(filepath.Join(pdir, "broken.wasm"), []byte("nope"), 0o644); err != nil {
		t.Fatal(err)
	}
	out, errOut, code := runCLI(t, dir, append([]string{"plugin", "reload"}, addr...)...)
	if code != 1 || !strings.Contains(errOut, "broken.wasm") || !strings.Contains(out, "echo") {
		t.Fatalf("reload: %d\n%s\n%s", code, out, errOut)
	}
}

// `hostd plugin kv put|delete` with --fence-key/--fence against a real
// daemon: a current fence writes; after the lease is released the same
// fence is refused with not_holder (exit 1) and nothing changes; a write
// without a fence is an operator's override; flag mistakes exit 2.
//
// Keys are one path segment on the wire: keys a plugin may make, such as
// "../x", "a//b", "..", "%2F", are written, read and deleted intact (they
// used to get "no route"). KV writes need a plugin that exists: "jobs" is
// the echo test plugin.
func TestPluginKVWriteCLI(t *testing.T) {
	dir := t.TempDir()
	pdir := filepath.Join(dir, "data", "plugins")
	if err := os.MkdirAll(pdir, 0o755); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(wasmtest.Build(t, "../../runtime/wasm/testdata/echo"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(pdir, "jobs.wasm"), b, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(wasmtest.CacheDir(), filepath.Join(dir, "data", "wasm-cache")); err != nil {
		t.Fatal(err)
	}
	d := startDaemon(t, dir, "--listen", "127.0.0.1:0", "--data-dir", "data")
	addr := []string{"--addr", d.addr}
	cli := func(args ...string) (string, string, int) {
		t.Helper()
		return runCLI(t, dir, append(args, addr...)...)
	}
	c, err := client.New(d.addr)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	g, err := c.AcquireLock(ctx, client.AcquireLock{Keys: []client.LockKey{{Domain: "job", Key: "r0"}}, TTL: "1m", Owner: "cli-test"})
	if err != nil {
		t.Fatal(err)
	}
	fence := []string{"--fence-key", "job:r0", "--fence", strconv.FormatUint(g.Fence, 10)}

	if out, errOut, code := cli(append([]string{"plugin", "kv", "put", "jobs", "owner/r0", "worker-1"}, fence...)...); code != 0 || !strings.Contains(out, "owner/r0") {
		t.Fatalf("fenced put: %d\n%s%s", code, out, errOut)
	}
	if out, _, code := cli("plugin", "kv", "get", "jobs", "owner/r0"); code != 0 || strings.TrimSpace(out) != "worker-1" {
		t.Fatalf("get: %d %q", code, out)
	}
	if err := c.ReleaseLock(ctx, g.ID, g.Token); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		append([]string{"plugin", "kv", "put", "jobs", "owner/r0", "stale"}, fence...),
		append([]string{"plugin", "kv", "delete", "jobs", "owner/r0"}, fence...),
	} {
		if _, errOut, code := cli(args...); code != 1 || !strings.Contains(errOut, "not_holder") {
			t.Fatalf("%v after release: %d %s", args[:3], code, errOut)
		}
	}
	if out, _, _ := cli("plugin", "kv", "get", "jobs", "owner/r0"); strings.TrimSpace(out) != "worker-1" {
		t.Fatalf("a stale fence changed the value: %q", out)
	}

	// Unfenced (no tokens configured: every caller is admin), base64.
	if _, errOut, code := cli("plugin", "kv", "put", "jobs", "owner/r0", "--base64", "b3BlcmF0b3I="); code != 0 {
		t.Fatalf("unfenced put: %d %s", code, errOut)
	}
	if out, _, _ := cli("plugin", "kv", "get", "jobs", "owner/r0"); strings.TrimSpace(out) != "operator" {
		t.Fatalf("after the override: %q", out)
	}
	if _, errOut, code := cli("plugin", "kv", "delete", "jobs", "owner/r0"); code != 0 {
		t.Fatalf("unfenced delete: %d %s", code, errOut)
	}
	if _, errOut, code := cli("plugin", "kv", "get", "jobs", "owner/r0"); code != 1 || !strings.Contains(errOut, "not_found") {
		t.Fatalf("get after delete: %d %s", code, errOut)
	}

	// Keys that look like path structure.
	for _, k := range []string{"../x", "a//b", "..", "%2F", ".", "a/../b", "x y?#"} {
		if _, errOut, code := cli("plugin", "kv", "put", "jobs", k, "v:"+k); code != 0 {
			t.Fatalf("put %q: %d %s", k, code, errOut)
		}
		if out, errOut, code := cli("plugin", "kv", "get", "jobs", k); code != 0 || strings.TrimSpace(out) != "v:"+k {
			t.Fatalf("get %q: %d %q %s", k, code, out, errOut)
		}
		if _, errOut, code := cli("plugin", "kv", "delete", "jobs", k); code != 0 {
			t.Fatalf("delete %q: %d %s", k, code, errOut)
		}
		if _, errOut, code := cli("plugin", "kv", "get", "jobs", k); code != 1 || !strings.Contains(errOut, "not_found") {
			t.Fatalf("get %q after delete: %d %s", k, code, errOut)
		}
	}
	// A plugin that does not exist: 404, nothing written.
	if _, errOut, code := cli("plugin", "kv", "put", "nosuch", "k", "v"); code != 1 || !strings.Contains(errOut, "not_found") {
		t.Fatalf("put into a plugin that does not exist: %d %s", code, errOut)
	}

	for _, args := range [][]string{
		{"plugin", "kv", "put", "jobs", "k", "v", "--fence", "3"},
		{"plugin", "kv", "put", "jobs", "k", "v", "--fence-key", "job:r0"},
		{"plugin", "kv", "put", "jobs", "k", "v", "--fence-key", "nodomain", "--fence", "3"},
		{"plugin", "kv", "put", "jobs", "k", "%%%", "--base64"},
		{"plugin", "kv", "delete", "jobs", "k", "--fence", "0", "--fence-key", "job:r0"},
	} {
		if _, errOut, code := cli(args...); code != 2 {
			t.Errorf("%v: exit %d, want 2 (%s)", args, code, errOut)
		}
	}
}

// `hostd plugin reload` against a cluster prints each replica's outcome
// and exits 1 when one was not ok (the answer is a cluster replica's,
// recorded from TestFanOutTracesAndPluginReload's shape).
func TestPluginReloadPrintsMembers(t *testing.T) {
	answer := wire.PluginReload{Items: []wire.Plugin{}, Errors: []wire.PluginLoadError{}, Members: []wire.PluginReloadMember{
		{Name: "r0", Address: "http://a", Leader: true, Outcome: "ok", Plugins: map[string]string{"echo": "03cce932482c9999"}},
		{Name: "r1", Address: "http://b", Outcome: "ok", Plugins: map[string]string{"echo": "03cce932482c9999"}},
		{Name: "r2", Address: "http://c", Outcome: "unreachable", Error: "connection refused"},
	}}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != "POST" || r.URL.Path != "/v1/plugins/reload" {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(answer)
	}))
	defer srv.Close()
	out, _, code := runCmd(t, "--addr", srv.URL, "plugin", "reload")
	if code != exitError {
		t.Fatalf("exit %d with an unreachable replica, want 1:\n%s", code, out)
	}
	var rows []string
	for _, l := range strings.Split(out, "\n") {
		rows = append(rows, strings.Join(strings.Fields(l), " "))
	}
	for _, want := range []string{"REPLICA ROLE OUTCOME PLUGINS ERROR", "r0 leader ok echo=03cce932482c",
		"r1 follower ok echo=03cce932482c", "r2 follower unreachable connection refused"} {
		if !slices.Contains(rows, want) {
			t.Fatalf("missing %q in:\n%s", want, out)
		}
	}
	answer.Members = answer.Members[:2]
	if _, _, code = runCmd(t, "--addr", srv.URL, "plugin", "reload"); code != 0 {
		t.Fatalf("exit %d with every replica ok", code)
	}
}

package main

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/hostd-dev/hostd/client"
)

// Every broadcast operation through the CLI against the real binary.
func TestBroadcastCLI(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "hostd.yaml")
	if err := os.WriteFile(cfg, []byte("broadcast:\n  vchannels: [orders/0, orders/1]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	d := startDaemon(t, dir, "-c", cfg, "--listen", "127.0.0.1:0", "--data-dir", "data")
	addr := []string{"--addr", d.addr}

	var r client.BroadcastResult
	cliJSON(t, dir, &r, append([]string{"broadcast", "send", "noop", "orders/0", "orders/1", "--payload", "hello",
		"--key", "collection:shop.orders:exclusive", "--idempotency-key", "req-42", "-p", "k=v"}, addr...)...)
	if r.State != "TOMBSTONE" || r.Duplicate || len(r.Appends) != 3 {
		t.Fatalf("send: %+v", r)
	}
	var dup client.BroadcastResult
	cliJSON(t, dir, &dup, append([]string{"broadcast", "send", "noop", "orders/1", "orders/0", "--payload", "hello", "-p", "k=v", "--idempotency-key", "req-42"}, addr...)...)
	if !dup.Duplicate || dup.ID != r.ID {
		t.Fatalf("duplicate: %+v", dup)
	}
	// The same key with another request is a conflict naming the original.
	_, errOut, code := runCLI(t, dir, append([]string{"broadcast", "send", "noop", "orders/0", "orders/1", "--payload", "other", "--idempotency-key", "req-42"}, addr...)...)
	if code == 0 || !strings.Contains(errOut, "409") || !strings.Contains(errOut, "broadcast "+strconv.FormatUint(r.ID, 10)) {
		t.Fatalf("reused key with another request: %d %s", code, errOut)
	}
	id := strconv.FormatUint(r.ID, 10)
	out, _, code := runCLI(t, dir, append([]string{"broadcast", "get", id}, addr...)...)
	if code != 0 || !strings.Contains(out, "TOMBSTONE") || !strings.Contains(out, "orders/1") || !strings.Contains(out, "trace:") {
		t.Fatalf("get: %d\n%s", code, out)
	}
	// ack_sync_up: waits for the consumer's ack.
	var p client.BroadcastResult
	cliJSON(t, dir, &p, append([]string{"broadcast", "send", "noop", "orders/0", "--ack-sync-up", "--wait", "appended"}, addr...)...)
	pid := strconv.FormatUint(p.ID, 10)
	out, _, _ = runCLI(t, dir, append([]string{"broadcast", "get", pid}, addr...)...)
	if !strings.Contains(out, "waiting for: orders/0") {
		t.Fatalf("get of a waiting task:\n%s", out)
	}
	// abandon needs a reason; then retry; then it waits for the ack again.
	if _, _, code := runCLI(t, dir, append([]string{"broadcast", "abandon", pid}, addr...)...); code == 0 {
		t.Fatal("abandon without --reason must fail")
	}
	var task client.BroadcastTask
	cliJSON(t, dir, &task, append([]string{"broadcast", "abandon", pid, "--reason", "consumer gone"}, addr...)...)
	if task.State != "FAILED" || task.Abandoned == nil || task.Abandoned.Reason != "consumer gone" {
		t.Fatalf("abandon: %+v", task)
	}
	cliJSON(t, dir, &task, append([]string{"broadcast", "retry", pid}, addr...)...)
	if task.State != "PENDING" {
		t.Fatalf("retry: %+v", task)
	}
	// The retried task holds the shared cluster key until acked.
	out, _, code = runCLI(t, dir, append([]string{"broadcast", "locks", "cluster:cluster"}, addr...)...)
	if code != 0 || !strings.Contains(out, "cluster:cluster") || !strings.Contains(out, "holder") || !strings.Contains(out, " "+pid+" ") {
		t.Fatalf("broadcast locks: %d\n%s", code, out)
	}
	var locks []client.BroadcastLock
	cliJSON(t, dir, &locks, append([]string{"broadcast", "locks"}, addr...)...)
	if len(locks) != 1 || len(locks[0].Holders) != 1 || strconv.FormatUint(locks[0].Holders[0].BroadcastID, 10) != pid {
		t.Fatalf("broadcast locks -o json: %+v", locks)
	}
	for i := 0; i < 200 && task.State == "PENDING"; i++ {
		_, errOut, code := runCLI(t, dir, append([]string{"broadcast", "ack", pid, "orders/0", "-o", "json"}, addr...)...)
		if code != 0 && !strings.Contains(errOut, "not_appended") {
			t.Fatalf("ack: %d %s", code, errOut)
		}
		cliJSON(t, dir, &task, append([]string{"broadcast", "get", pid}, addr...)...)
	}
	if task.State != "TOMBSTONE" {
		t.Fatalf("after ack: %+v", task)
	}
	var l client.List[client.BroadcastTask]
	cliJSON(t, dir, &l, append([]string{"broadcast", "ls", "--state", "TOMBSTONE", "--all"}, addr...)...)
	if len(l.Items) != 2 {
		t.Fatalf("ls: %+v", l)
	}
	// Errors carry the API's code; usage errors exit 2.
	_, errOut, code = runCLI(t, dir, append([]string{"broadcast", "send", "NoSuchType"}, addr...)...)
	if code != 1 || !strings.Contains(errOut, "unknown message type") {
		t.Fatalf("unknown type: %d %s", code, errOut)
	}
	if _, _, code := runCLI(t, dir, append([]string{"broadcast", "get", "abc"}, addr...)...); code != 2 {
		t.Fatalf("bad id: exit %d", code)
	}
	if _, _, code := runCLI(t, dir, append([]string{"broadcast", "send", "noop", "--key", "nodomain"}, addr...)...); code != 2 {
		t.Fatalf("bad key: exit %d", code)
	}
}

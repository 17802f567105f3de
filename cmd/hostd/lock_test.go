package main

import (
	"context"
	"encoding/json"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hostd-dev/hostd/client"
)

func cliJSON(t *testing.T, dir string, v any, args ...string) {
	t.Helper()
	out, errOut, code := runCLI(t, dir, append(args, "-o", "json")...)
	if code != 0 {
		t.Fatalf("hostd %v: exit %d: %s", args, code, errOut)
	}
	if err := json.Unmarshal([]byte(out), v); err != nil {
		t.Fatalf("hostd %v: %v\n%s", args, err, out)
	}
}

// Locks scenario 7 through the real binary: kill -9 with grants held;
// after the restart no fence is reused, the grant unexpired at the kill
// still holds with its TTL restarted, the expired one is gone.
func TestLockKill9Restart(t *testing.T) {
	dir := t.TempDir()
	d := startDaemon(t, dir, "--listen", "127.0.0.1:0", "--data-dir", "data")
	var long, short client.LockGrant
	cliJSON(t, dir, &long, "lock", "acquire", "svc:long", "--shared", "db:one", "--ttl", "5m", "--owner", "ops", "--meta", "ticket=7", "--addr", d.addr)
	cliJSON(t, dir, &short, "lock", "acquire", "svc:short", "--ttl", "1s", "--addr", d.addr)
	if long.Token == "" || short.Fence <= long.Fence {
		t.Fatalf("grants %+v %+v", long, short)
	}
	time.Sleep(1500 * time.Millisecond) // short expires before the kill
	if err := d.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-d.done
	boot := time.Now()
	d2 := startDaemon(t, dir, "--listen", "127.0.0.1:0", "--data-dir", "data")
	c, err := client.New(d2.addr)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := c.WaitReady(ctx, 20*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	g, err := c.GetLock(ctx, long.ID)
	if err != nil {
		t.Fatalf("grant held at the kill is gone: %v", err)
	}
	if g.ExpiresAt.Before(boot.Add(5*time.Minute - 5*time.Second)) {
		t.Fatalf("TTL not restarted at boot: expires %v, boot %v", g.ExpiresAt, boot)
	}
	if err := c.CheckFence(ctx, "svc", "long", long.Fence); err != nil {
		t.Fatal(err)
	}
	if _, err := c.GetLock(ctx, short.ID); !client.IsNotFound(err) {
		t.Fatalf("expired grant survived the restart: %v", err)
	}
	// The holder keeps working with its token; the fence is never reused.
	if _, err := c.RenewLock(ctx, long.ID, long.Token, ""); err != nil {
		t.Fatal(err)
	}
	_, err = c.AcquireLock(ctx, client.AcquireLock{Owner: "x", Keys: []client.LockKey{{Domain: "svc", Key: "long"}}})
	if !client.HasCode(err, "locked") {
		t.Fatalf("held key acquired after restart: %v", err)
	}
	n, err := c.AcquireLock(ctx, client.AcquireLock{Owner: "x", Keys: []client.LockKey{{Domain: "svc", Key: "short"}}})
	if err != nil {
		t.Fatal(err)
	}
	if n.Fence <= short.Fence {
		t.Fatalf("fence reused after kill -9: %d <= %d", n.Fence, short.Fence)
	}
	if err := c.ReleaseLock(ctx, long.ID, long.Token); err != nil {
		t.Fatal(err)
	}
}

// The lock and presence commands against a real daemon.
func TestLockAndPresenceCLI(t *testing.T) {
	dir := t.TempDir()
	d := startDaemon(t, dir, "--listen", "127.0.0.1:0", "--data-dir", "data")
	addr := []string{"--addr", d.addr}
	var g client.LockGrant
	cliJSON(t, dir, &g, append([]string{"lock", "acquire", "collection:db1.users", "--owner", "alice", "--meta", "why=migrate"}, addr...)...)
	// A conflicting acquire exits 1 naming the holder.
	_, errOut, code := runCLI(t, dir, append([]string{"lock", "acquire", "collection:db1.users", "--owner", "bob"}, addr...)...)
	if code != 1 || !strings.Contains(errOut, "locked") || !strings.Contains(errOut, "alice") || strings.Contains(errOut, g.Token) {
		t.Fatalf("conflict: exit %d: %s", code, errOut)
	}
	out, _, code := runCLI(t, dir, append([]string{"lock", "inspect", "collection:db1.users"}, addr...)...)
	if code != 0 || !strings.Contains(out, "alice") || !strings.Contains(out, "why=migrate") || strings.Contains(out, g.Token) {
		t.Fatalf("inspect: %d %s", code, out)
	}
	var l client.List[client.LockGrant]
	cliJSON(t, dir, &l, append([]string{"lock", "ls"}, addr...)...)
	if len(l.Items) != 1 || l.Items[0].Token != "" {
		t.Fatalf("ls %+v", l)
	}
	_, errOut, code = runCLI(t, dir, append([]string{"lock", "renew", g.ID, "--token", "bad"}, addr...)...)
	if code != 1 || !strings.Contains(errOut, "not_holder") {
		t.Fatalf("renew with a bad token: %d %s", code, errOut)
	}
	cliJSON(t, dir, &g, append([]string{"lock", "renew", g.ID, "--token", g.Token, "--ttl", "1m"}, addr...)...)
	if _, _, code := runCLI(t, dir, append([]string{"lock", "check-fence", "collection:db1.users", strconv.FormatUint(g.Fence, 10)}, addr...)...); code != 0 {
		t.Fatalf("check-fence exit %d", code)
	}
	var fr client.ForceReleaseResult
	cliJSON(t, dir, &fr, append([]string{"lock", "force-release", "collection:db1.users", "--reason", "stuck"}, addr...)...)
	if fr.Fence <= g.Fence || len(fr.Evicted) != 1 {
		t.Fatalf("force-release %+v", fr)
	}
	out, _, _ = runCLI(t, dir, append([]string{"lock", "audit"}, addr...)...)
	if !strings.Contains(out, "stuck") || !strings.Contains(out, "alice") {
		t.Fatalf("audit: %s", out)
	}
	_, errOut, code = runCLI(t, dir, append([]string{"lock", "release", g.ID, "--token", g.Token}, addr...)...)
	if code != 1 || !strings.Contains(errOut, "not_holder") {
		t.Fatalf("release after eviction: %d %s", code, errOut)
	}
	if _, errOut, code := runCLI(t, dir, append([]string{"lock", "acquire"}, addr...)...); code != 2 || !strings.Contains(errOut, "requires at least one key") {
		t.Fatalf("acquire without keys: %d %s", code, errOut)
	}

	var e client.PresenceEntry
	cliJSON(t, dir, &e, append([]string{"presence", "announce", "host:10", "--holder", "alice", "--ttl", "30s"}, addr...)...)
	var e2 client.PresenceEntry
	cliJSON(t, dir, &e2, append([]string{"presence", "announce", "host:10", "--holder", "bob"}, addr...)...)
	var who []client.PresenceEntry
	cliJSON(t, dir, &who, append([]string{"presence", "who", "host:10"}, addr...)...)
	if len(who) != 2 {
		t.Fatalf("who %+v", who)
	}
	if _, _, code := runCLI(t, dir, append([]string{"presence", "withdraw", "host:10", "--holder", "alice", "--token", e.Token}, addr...)...); code != 0 {
		t.Fatalf("withdraw exit %d", code)
	}
	cliJSON(t, dir, &who, append([]string{"presence", "who", "host:10"}, addr...)...)
	if len(who) != 1 || who[0].Holder != "bob" {
		t.Fatalf("who after withdraw %+v", who)
	}
}

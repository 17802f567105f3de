package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
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
	_, errOut, code = runCLI(t, dir, append([]string{"lock", "renew", g.ID, "--grant-token", "bad"}, addr...)...)
	if code != 1 || !strings.Contains(errOut, "not_holder") {
		t.Fatalf("renew with a bad token: %d %s", code, errOut)
	}
	cliJSON(t, dir, &g, append([]string{"lock", "renew", g.ID, "--grant-token", g.Token, "--ttl", "1m"}, addr...)...)
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
	_, errOut, code = runCLI(t, dir, append([]string{"lock", "release", g.ID, "--grant-token", g.Token}, addr...)...)
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
	if _, _, code := runCLI(t, dir, append([]string{"presence", "withdraw", "host:10", "--holder", "alice", "--presence-token", e.Token}, addr...)...); code != 0 {
		t.Fatalf("withdraw exit %d", code)
	}
	cliJSON(t, dir, &who, append([]string{"presence", "who", "host:10"}, addr...)...)
	if len(who) != 1 || who[0].Holder != "bob" {
		t.Fatalf("who after withdraw %+v", who)
	}
}

// Issue 11: with auth on, the grant's and the presence entry's tokens no
// longer hide the global bearer --token: renew, release, announce-refresh
// and withdraw authenticate with --token (or HOSTD_TOKEN) and name the
// grant's token with --grant-token / HOSTD_GRANT_TOKEN and the entry's
// with --presence-token / HOSTD_PRESENCE_TOKEN.
func TestLockCLITokensWithAuth(t *testing.T) {
	const bearer = "ops-secret-0123456789"
	dir := t.TempDir()
	f := writeConfig(t, dir, fmt.Sprintf(`
api:
  listen: 127.0.0.1:0
  tokens:
    - {name: ops, token: %s, role: write}
`, bearer))
	d := startDaemon(t, dir, "-c", f, "--data-dir", "data")
	auth := []string{"--addr", d.addr, "--token", bearer}
	var g client.LockGrant
	cliJSON(t, dir, &g, append([]string{"lock", "acquire", "job:x", "--ttl", "1m"}, auth...)...)
	var r client.LockGrant
	cliJSON(t, dir, &r, append([]string{"lock", "renew", g.ID, "--grant-token", g.Token, "--ttl", "2m"}, auth...)...)
	if r.TTL != "2m0s" {
		t.Fatalf("renewed %+v", r)
	}
	// Without a grant token: a usage error, before any request.
	if _, errOut, code := runCLI(t, dir, append([]string{"lock", "release", g.ID}, auth...)...); code != exitUsage || !strings.Contains(errOut, "--grant-token") {
		t.Fatalf("release without a grant token: %d %s", code, errOut)
	}
	// The grant token from the environment, the bearer from the flag.
	if _, errOut, code := runCLIEnv(t, dir, []string{"HOSTD_GRANT_TOKEN=" + g.Token}, append([]string{"lock", "release", g.ID}, auth...)...); code != 0 {
		t.Fatalf("release with HOSTD_GRANT_TOKEN: %d %s", code, errOut)
	}
	// Presence: the bearer from the environment, the entry token by flag.
	var e client.PresenceEntry
	cliJSON(t, dir, &e, append([]string{"presence", "announce", "host:1", "--holder", "alice"}, auth...)...)
	env := []string{"HOSTD_TOKEN=" + bearer}
	if _, errOut, code := runCLIEnv(t, dir, env, "presence", "announce", "host:1", "--holder", "alice", "--presence-token", e.Token, "--addr", d.addr); code != 0 {
		t.Fatalf("refresh: %d %s", code, errOut)
	}
	if _, errOut, code := runCLIEnv(t, dir, env, "presence", "withdraw", "host:1", "--holder", "alice", "--presence-token", e.Token, "--addr", d.addr); code != 0 {
		t.Fatalf("withdraw: %d %s", code, errOut)
	}
	var who []client.PresenceEntry
	cliJSON(t, dir, &who, append([]string{"presence", "who", "host:1"}, auth...)...)
	if len(who) != 0 {
		t.Fatalf("who after withdraw %+v", who)
	}
}

// runCLIEnv is runCLI with extra environment variables.
func runCLIEnv(t *testing.T, dir string, env []string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, hostdBin, args...)
	cmd.Dir = dir
	cmd.Env = cleanEnv(env...)
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	err := cmd.Run()
	code = cmd.ProcessState.ExitCode()
	if err != nil && code < 0 {
		t.Fatalf("hostd %v: %v", args, err)
	}
	return o.String(), e.String(), code
}

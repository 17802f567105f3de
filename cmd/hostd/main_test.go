package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

var hostdBin string

// TestMain builds the real binary once; the subprocess tests run it.
func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "hostd-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	hostdBin = filepath.Join(dir, "hostd")
	if runtime.GOOS == "windows" {
		hostdBin += ".exe"
	}
	out, err := exec.Command("go", "build", "-ldflags", "-X main.version=v0.0.0-test", "-o", hostdBin, ".").CombinedOutput()
	if err != nil {
		fmt.Fprintf(os.Stderr, "go build: %v\n%s", err, out)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// cleanEnv is the environment without HOSTD_* variables.
func cleanEnv(extra ...string) []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "HOSTD_") {
			env = append(env, kv)
		}
	}
	return append(env, extra...)
}

// runCLI runs the binary to completion.
func runCLI(t *testing.T, dir string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, hostdBin, args...)
	cmd.Dir = dir
	cmd.Env = cleanEnv()
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	err := cmd.Run()
	code = cmd.ProcessState.ExitCode()
	if err != nil && code < 0 {
		t.Fatalf("hostd %v: %v", args, err)
	}
	return o.String(), e.String(), code
}

// daemon is a running `hostd serve` subprocess.
type daemon struct {
	cmd  *exec.Cmd
	addr string // http://host:port
	mu   sync.Mutex
	logs bytes.Buffer
	done chan struct{}
}

func (d *daemon) Logs() string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.logs.String()
}

var listenRE = regexp.MustCompile(`msg="api listening".* addr=(\S+)`)

// startDaemon starts `hostd serve args...` in dir and waits until it
// listens (it must listen on port 0; the port is read from the log).
func startDaemon(t *testing.T, dir string, args ...string) *daemon {
	t.Helper()
	d := &daemon{done: make(chan struct{})}
	d.cmd = exec.Command(hostdBin, append([]string{"serve"}, args...)...)
	d.cmd.Dir = dir
	d.cmd.Env = cleanEnv()
	pr, pw := io.Pipe()
	d.cmd.Stderr = pw
	d.cmd.Stdout = io.Discard
	if err := d.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	addrc := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			line := sc.Text()
			d.mu.Lock()
			d.logs.WriteString(line + "\n")
			d.mu.Unlock()
			if m := listenRE.FindStringSubmatch(line); m != nil {
				addrc <- "http://" + m[1]
			}
		}
	}()
	go func() {
		_ = d.cmd.Wait()
		pw.Close()
		close(d.done)
	}()
	t.Cleanup(func() {
		select {
		case <-d.done:
		default:
			_ = d.cmd.Process.Kill()
			<-d.done
		}
	})
	select {
	case d.addr = <-addrc:
	case <-d.done:
		t.Fatalf("hostd exited before listening (code %d):\n%s", d.cmd.ProcessState.ExitCode(), d.Logs())
	case <-time.After(3 * time.Minute): // generous: plugins compile before the API listens, slowly on a loaded machine
		t.Fatalf("hostd did not start listening:\n%s", d.Logs())
	}
	d.waitReady(t)
	return d
}

// waitReady polls /readyz until it answers 200. The API listens before
// recovery and plugin loading finish (so /readyz can say what it waits
// for), so a test that talks to the daemon right after it listens must
// wait for readiness first.
func (d *daemon) waitReady(t *testing.T) {
	t.Helper()
	// Generous: readiness waits for recovery and plugin compiles, which
	// take long on a loaded CI machine (e2e allows 90 s too).
	deadline := time.Now().Add(90 * time.Second)
	last := ""
	for time.Now().Before(deadline) {
		select {
		case <-d.done:
			t.Fatalf("hostd exited before it was ready:\n%s", d.Logs())
		default:
		}
		res, err := http.Get(d.addr + "/readyz")
		if err == nil {
			b, _ := io.ReadAll(res.Body)
			res.Body.Close()
			if res.StatusCode == http.StatusOK {
				return
			}
			last = fmt.Sprintf("%d %s", res.StatusCode, b)
		} else {
			last = err.Error()
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("hostd not ready after 90s (last /readyz: %s):\n%s", last, d.Logs())
}

// stop sends SIGINT and returns the exit code.
func (d *daemon) stop(t *testing.T) int {
	t.Helper()
	return d.signal(t, syscall.SIGINT)
}

// signal sends sig and returns the exit code.
func (d *daemon) signal(t *testing.T, sig os.Signal) int {
	t.Helper()
	if err := d.cmd.Process.Signal(sig); err != nil {
		t.Fatal(err)
	}
	select {
	case <-d.done:
	case <-time.After(30 * time.Second):
		t.Fatalf("hostd did not exit after SIGINT:\n%s", d.Logs())
	}
	return d.cmd.ProcessState.ExitCode()
}

func get(t *testing.T, method, url, token string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(method, url, nil)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, string(b)
}

// TestServeDefaults: no config file, default data directory in the working
// directory, /healthz 200, SIGINT exits 0.
func TestServeDefaults(t *testing.T) {
	dir := t.TempDir()
	d := startDaemon(t, dir, "--listen", "127.0.0.1:0")
	if code, body := get(t, "GET", d.addr+"/healthz", ""); code != 200 {
		t.Fatalf("/healthz: %d %s", code, body)
	}
	if code, body := get(t, "GET", d.addr+"/readyz", ""); code != 200 {
		t.Fatalf("/readyz: %d %s", code, body)
	}
	if fi, err := os.Stat(filepath.Join(dir, "hostd-data")); err != nil || !fi.IsDir() {
		t.Fatalf("default data directory ./hostd-data not created: %v", err)
	}
	// The CLI talks to it.
	out, errOut, code := runCLI(t, dir, "version", "--server", "-o", "json", "--addr", d.addr)
	if code != 0 || !strings.Contains(out, `"server"`) || !strings.Contains(out, "v0.0.0-test") {
		t.Fatalf("version --server: %d %s %s", code, out, errOut)
	}
	if code := d.stop(t); code != 0 {
		t.Fatalf("exit code after SIGINT: %d\n%s", code, d.Logs())
	}
	if !strings.Contains(d.Logs(), "hostd stopped") {
		t.Fatalf("no clean stop in the log:\n%s", d.Logs())
	}
}

func TestSecondInstanceFailsFast(t *testing.T) {
	dir := t.TempDir()
	first := startDaemon(t, dir, "--listen", "127.0.0.1:0", "--data-dir", "shared-data")
	start := time.Now()
	_, errOut, code := runCLI(t, dir, "serve", "--listen", "127.0.0.1:0", "--data-dir", "shared-data")
	if code == 0 {
		t.Fatal("second instance exited 0")
	}
	if time.Since(start) > 15*time.Second {
		t.Fatalf("second instance took %v to fail", time.Since(start))
	}
	abs, _ := filepath.Abs(filepath.Join(dir, "shared-data"))
	if !strings.Contains(errOut, abs) || !strings.Contains(errOut, "in use") {
		t.Fatalf("message does not name the directory %s:\n%s", abs, errOut)
	}
	if code, _ := get(t, "GET", first.addr+"/healthz", ""); code != 200 {
		t.Fatal("first instance stopped answering")
	}
	if code := first.stop(t); code != 0 {
		t.Fatalf("first exit code %d", code)
	}
}

func writeConfig(t *testing.T, dir, body string) string {
	t.Helper()
	p := filepath.Join(dir, "hostd.yaml")
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestConfigMistakesReported(t *testing.T) {
	dir := t.TempDir()
	f := writeConfig(t, dir, `
api:
  request_timeout: never
log:
  level: loud
data:
  gc_discard_ratio: 7
  sync_writs: true
`)
	for _, args := range [][]string{{"check-config", "-c", f}, {"serve", "-c", f}} {
		_, errOut, code := runCLI(t, dir, args...)
		if code != exitConfig {
			t.Errorf("%v: exit %d, want %d", args, code, exitConfig)
		}
		for _, key := range []string{"api.request_timeout", "log.level", "data.gc_discard_ratio", "data.sync_writs: unknown key"} {
			if !strings.Contains(errOut, key) {
				t.Errorf("%v: %q not reported:\n%s", args, key, errOut)
			}
		}
		if !strings.Contains(errOut, "4 problems") {
			t.Errorf("%v: want 4 problems:\n%s", args, errOut)
		}
	}
	out, errOut, code := runCLI(t, dir, "check-config", "-c", f, "-o", "json")
	var res struct {
		OK       bool
		Problems []struct{ Key, Message string }
	}
	if code != exitConfig || json.Unmarshal([]byte(out), &res) != nil || res.OK || len(res.Problems) != 4 {
		t.Errorf("check-config -o json: %d %s %s", code, out, errOut)
	}
	good := writeConfig(t, t.TempDir(), "log:\n  level: debug\n")
	if out, errOut, code := runCLI(t, dir, "check-config", "-c", good); code != 0 || !strings.Contains(out, "valid") {
		t.Errorf("valid config: %d %s %s", code, out, errOut)
	}
	if out, errOut, code := runCLI(t, dir, "check-config", "-c", mustAbs(t, filepath.Join("..", "..", "examples", "hostd.yaml"))); code != 0 {
		t.Errorf("examples/hostd.yaml: %d %s %s", code, out, errOut)
	}
}

func TestNonLoopbackWithoutTokensRefuses(t *testing.T) {
	_, errOut, code := runCLI(t, t.TempDir(), "serve", "--listen", "0.0.0.0:0")
	if code == 0 || !strings.Contains(errOut, "not a loopback address") || !strings.Contains(errOut, "tokens") {
		t.Fatalf("exit %d:\n%s", code, errOut)
	}
}

func TestTokens(t *testing.T) {
	const readTok, adminTok = "read-secret-0123456789", "admin-secret-0123456789"
	dir := t.TempDir()
	f := writeConfig(t, dir, fmt.Sprintf(`
api:
  listen: 127.0.0.1:0
  tokens:
    - {name: dash, token: %s, role: read}
    - {name: ops, token: %s, role: admin}
    - {name: old, token: old-secret-0123456789, role: admin, expires_at: 2020-01-01T00:00:00Z}
    - {name: soon, token: soon-secret-0123456789, role: read, expires_at: %s}
`, readTok, adminTok, time.Now().Add(48*time.Hour).UTC().Format(time.RFC3339)))
	d := startDaemon(t, dir, "-c", f)
	cases := []struct {
		method, path, token string
		want                int
	}{
		{"GET", "/healthz", "", 200},
		{"GET", "/v1/version", "", 401},
		{"GET", "/v1/version", "wrong-secret-0123456789", 401},
		{"GET", "/v1/version", readTok, 200},
		{"GET", "/metrics", readTok, 200},
		{"POST", "/v1/broadcasts", readTok, 403}, // a read token cannot write
		{"POST", "/v1/admin/backup", readTok, 403},
	}
	for _, c := range cases {
		if code, body := get(t, c.method, d.addr+c.path, c.token); code != c.want {
			t.Errorf("%s %s token=%q: %d, want %d: %s", c.method, c.path, c.token, code, c.want, body)
		}
	}
	_, errOut, code := runCLI(t, dir, "version", "--server", "--addr", d.addr, "--token", "nope-nope-nope-nope")
	if code != exitError || !strings.Contains(errOut, "unauthenticated") {
		t.Errorf("CLI with a wrong token: %d %s", code, errOut)
	}
	// Expired: 401 token_expired; the start-up log warned about it and
	// about the one expiring in two days.
	if code, body := get(t, "GET", d.addr+"/v1/version", "old-secret-0123456789"); code != 401 || !strings.Contains(body, `"token_expired"`) {
		t.Errorf("expired token: %d %s", code, body)
	}
	if code, body := get(t, "GET", d.addr+"/v1/version", "soon-secret-0123456789"); code != 200 {
		t.Errorf("token expiring in two days: %d %s", code, body)
	}
	if logs := d.Logs(); !strings.Contains(logs, "api token has expired") || !strings.Contains(logs, "token=old") ||
		!strings.Contains(logs, "api token expires soon") || !strings.Contains(logs, "token=soon") {
		t.Errorf("no start-up warnings about the expired and the expiring token:\n%s", logs)
	}
	if code := d.stop(t); code != 0 {
		t.Fatalf("exit %d", code)
	}
}

func TestUsageErrors(t *testing.T) {
	dir := t.TempDir()
	if _, errOut, code := runCLI(t, dir, "serve", "--nope"); code != exitUsage || !strings.Contains(errOut, "unknown flag") {
		t.Errorf("unknown flag: %d %s", code, errOut)
	}
	if _, errOut, code := runCLI(t, dir, "version", "-o", "yaml"); code != exitUsage {
		t.Errorf("bad -o: %d %s", code, errOut)
	}
	if out, _, code := runCLI(t, dir, "--help"); code != 0 || !strings.Contains(out, "serve") {
		t.Errorf("--help: %d %s", code, out)
	}
	if out, _, code := runCLI(t, dir, "version"); code != 0 || !strings.Contains(out, "v0.0.0-test") {
		t.Errorf("version: %d %s", code, out)
	}
}

func mustAbs(t *testing.T, p string) string {
	t.Helper()
	a, err := filepath.Abs(p)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func TestBackupRestoreCLI(t *testing.T) {
	const readTok, adminTok = "read-secret-0123456789", "admin-secret-0123456789"
	dir := t.TempDir()
	f := writeConfig(t, dir, fmt.Sprintf(`
api:
  listen: 127.0.0.1:0
  tokens:
    - {name: dash, token: %s, role: read}
    - {name: ops, token: %s, role: admin}
`, readTok, adminTok))
	d := startDaemon(t, dir, "-c", f, "--data-dir", "live")
	backup := filepath.Join(dir, "hostd.backup")
	if _, errOut, code := runCLI(t, dir, "backup", backup, "--addr", d.addr, "--token", readTok); code != exitError || !strings.Contains(errOut, "permission_denied") {
		t.Fatalf("backup with a read token: %d %s", code, errOut)
	}
	if _, err := os.Stat(backup + ".tmp"); !os.IsNotExist(err) {
		t.Fatalf("failed backup left %s.tmp", backup)
	}
	out, errOut, code := runCLI(t, dir, "backup", backup, "--addr", d.addr, "--token", adminTok, "-o", "json")
	if code != 0 || !strings.Contains(out, `"version"`) {
		t.Fatalf("backup: %d %s %s", code, out, errOut)
	}
	if fi, err := os.Stat(backup); err != nil || fi.Size() == 0 {
		t.Fatalf("backup file: %v", err)
	}
	if code := d.stop(t); code != 0 {
		t.Fatalf("exit %d", code)
	}
	if out, errOut, code := runCLI(t, dir, "restore", backup, "--data-dir", "restored"); code != 0 || !strings.Contains(out, "restored") {
		t.Fatalf("restore: %d %s %s", code, out, errOut)
	}
	if _, errOut, code := runCLI(t, dir, "restore", backup, "--data-dir", "restored"); code == 0 {
		t.Fatalf("restore into a non-empty directory succeeded: %s", errOut)
	}
	d2 := startDaemon(t, dir, "-c", f, "--data-dir", "restored")
	if code, body := get(t, "GET", d2.addr+"/readyz", ""); code != 200 {
		t.Fatalf("restored daemon not ready: %d %s", code, body)
	}
	if code := d2.signal(t, syscall.SIGTERM); code != 0 {
		t.Fatalf("exit %d", code)
	}
}

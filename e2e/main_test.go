package e2e

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hostd-dev/hostd/client"
	"github.com/hostd-dev/hostd/internal/wasmtest"
)

var hostdBin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "hostd-e2e")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	hostdBin = filepath.Join(dir, "hostd")
	out, err := exec.Command("go", "build", "-tags", "failpoints", "-o", hostdBin, "../cmd/hostd").CombinedOutput()
	if err != nil {
		fmt.Fprintf(os.Stderr, "build hostd: %v\n%s", err, out)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// collectionsWasm builds plugins/collections for wasip1 (cached).
func collectionsWasm(t *testing.T) string {
	return wasmtest.Build(t, "../plugins/collections")
}

func long() bool { return os.Getenv("HOSTD_LONG") == "1" }

// daemon is one hostd subprocess.
type daemon struct {
	cmd  *exec.Cmd
	addr string
	done chan struct{}
	err  error
}

func freePort(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

func writeConfig(t *testing.T, dir, addr string, vchannels []string) string {
	p := filepath.Join(dir, "hostd.yaml")
	y := fmt.Sprintf("api:\n  listen: %s\ndata:\n  dir: %s\nbroadcast:\n  vchannels: [%s]\n",
		addr, filepath.Join(dir, "data"), strings.Join(vchannels, ", "))
	if err := os.WriteFile(p, []byte(y), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// start runs hostd with extra environment; its output goes to logPath.
func start(t *testing.T, cfg, addr, logPath string, env ...string) *daemon {
	t.Helper()
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(hostdBin, "serve", "-c", cfg)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	d := &daemon{cmd: cmd, addr: "http://" + addr, done: make(chan struct{})}
	go func() {
		d.err = cmd.Wait()
		logf.Close()
		close(d.done)
	}()
	return d
}

// waitReady waits for /readyz; false if the process exited first.
func (d *daemon) waitReady(t *testing.T, c *client.Client) bool {
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case <-d.done:
			return false
		default:
		}
		ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
		err := c.Ready(ctx)
		cancel()
		if err == nil {
			return true
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("hostd not ready after 20s")
	return false
}

func (d *daemon) kill() {
	_ = d.cmd.Process.Signal(syscall.SIGKILL)
	<-d.done
}

func (d *daemon) stop(t *testing.T) {
	_ = d.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-d.done:
	case <-time.After(15 * time.Second):
		d.kill()
		t.Fatalf("hostd did not stop on SIGTERM")
	}
}

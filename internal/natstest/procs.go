package natstest

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/hostd-dev/hostd/internal/testport"
)

// BuildServer builds the nats-server binary (the module at the version in
// go.mod) into dir and returns its path.
func BuildServer(dir string) (string, error) {
	bin := filepath.Join(dir, "nats-server")
	out, err := exec.Command("go", "build", "-o", bin, "github.com/nats-io/nats-server/v2").CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("build nats-server: %v\n%s", err, out)
	}
	return bin, nil
}

// Procs is a 3-server NATS JetStream cluster of nats-server processes,
// each with its config, store dir and log in a temp dir, sync_interval
// always, server n<i> tagged az:<a+i>. Processes, unlike Start's servers
// embedded in the test process, can be killed with SIGKILL like a crashed
// machine; and an embedded server stopped and restarted in the same
// process may leave its streams without a leader (nats-server issue
// 6890), which deployments never see.
type Procs struct {
	t      testing.TB
	bin    string
	dir    string
	ports  []int
	routes []int
	mu     sync.Mutex
	cmds   []*exec.Cmd
	logs   []*os.File
}

// StartProcs starts 3 nats-server processes of bin (see BuildServer) and
// waits until JetStream answers; they are killed at the end of the test.
func StartProcs(t testing.TB, bin string) *Procs {
	t.Helper()
	c := &Procs{t: t, bin: bin, dir: t.TempDir(), cmds: make([]*exec.Cmd, 3), logs: make([]*os.File, 3)}
	for range 3 {
		c.ports = append(c.ports, testport.Pick(t))
		c.routes = append(c.routes, testport.Pick(t))
	}
	for i := range 3 {
		var rs []string
		for j, p := range c.routes {
			if j != i {
				rs = append(rs, fmt.Sprintf("nats-route://127.0.0.1:%d", p))
			}
		}
		conf := fmt.Sprintf(`server_name: n%d
listen: 127.0.0.1:%d
server_tags: ["az:%c"]
jetstream { store_dir: %q, sync_interval: always }
cluster { name: procs, listen: 127.0.0.1:%d, routes: [%s] }
`, i, c.ports[i], 'a'+i, filepath.Join(c.dir, fmt.Sprintf("n%d", i)), c.routes[i], strings.Join(rs, ", "))
		if err := os.WriteFile(c.conf(i), []byte(conf), 0o644); err != nil {
			t.Fatal(err)
		}
		c.Restart(i)
	}
	t.Cleanup(func() {
		for i := range 3 {
			c.Kill(i)
		}
	})
	deadline := time.Now().Add(60 * time.Second)
	for {
		err := c.jsReady()
		if err == nil {
			return c
		}
		if time.Now().After(deadline) {
			t.Fatalf("natstest: JetStream not ready after 60s: %v", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func (c *Procs) conf(i int) string { return filepath.Join(c.dir, fmt.Sprintf("n%d.conf", i)) }

// LogPath is server i's log file.
func (c *Procs) LogPath(i int) string { return filepath.Join(c.dir, fmt.Sprintf("n%d.log", i)) }

// jsReady: JetStream answers once it has a meta leader and knows its
// peers.
func (c *Procs) jsReady() error {
	nc, err := nats.Connect(c.URL(), nats.Timeout(time.Second))
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_, err = js.AccountInfo(ctx)
	return err
}

// URL lists every server (running or not).
func (c *Procs) URL() string {
	urls := make([]string, len(c.ports))
	for i := range c.ports {
		urls[i] = c.ServerURL(i)
	}
	return strings.Join(urls, ",")
}

// ServerURL is server i's client URL.
func (c *Procs) ServerURL(i int) string { return fmt.Sprintf("nats://127.0.0.1:%d", c.ports[i]) }

// Kill kills server i with SIGKILL (a crash) and waits for it.
func (c *Procs) Kill(i int) { c.signal(i, syscall.SIGKILL) }

// Stop stops server i cleanly (SIGTERM: it hands its leaderships over).
func (c *Procs) Stop(i int) { c.signal(i, syscall.SIGTERM) }

func (c *Procs) signal(i int, sig syscall.Signal) {
	c.mu.Lock()
	cmd, logf := c.cmds[i], c.logs[i]
	c.cmds[i], c.logs[i] = nil, nil
	c.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Signal(sig)
	_ = cmd.Wait()
	logf.Close()
}

// Restart starts server i (again) on its ports and store dir and waits
// until it accepts connections.
func (c *Procs) Restart(i int) {
	c.t.Helper()
	logf, err := os.OpenFile(c.LogPath(i), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		c.t.Fatal(err)
	}
	cmd := exec.Command(c.bin, "-c", c.conf(i))
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		logf.Close()
		c.t.Fatal(err)
	}
	c.mu.Lock()
	c.cmds[i], c.logs[i] = cmd, logf
	c.mu.Unlock()
	deadline := time.Now().Add(30 * time.Second)
	for {
		nc, err := nats.Connect(c.ServerURL(i), nats.Timeout(time.Second))
		if err == nil {
			nc.Close()
			return
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("natstest: nats-server n%d not accepting connections after 30s: %v", i, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

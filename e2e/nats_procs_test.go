package e2e

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

// natsProcs is a 3-server NATS JetStream cluster of nats-server processes
// (built by the tests from the nats-server module at the version in
// go.mod), each with its config, store dir and log in a temp dir,
// sync_interval always. Processes, not servers embedded in the test
// process: they can be killed with SIGKILL like a crashed machine, and a
// stopped embedded server restarted in the same process may leave its
// streams without a leader (nats-server issue 6890), which real
// deployments never see.
type natsProcs struct {
	t      *testing.T
	dir    string
	ports  []int
	routes []int
	mu     sync.Mutex
	cmds   []*exec.Cmd
	logs   []*os.File
}

var (
	natsBinOnce sync.Once
	natsBin     string
	natsBinErr  error
)

// natsServerBin builds nats-server once per test binary.
func natsServerBin(t *testing.T) string {
	natsBinOnce.Do(func() {
		natsBin = filepath.Join(filepath.Dir(hostdBin), "nats-server")
		out, err := exec.Command("go", "build", "-o", natsBin, "github.com/nats-io/nats-server/v2").CombinedOutput()
		if err != nil {
			natsBinErr = fmt.Errorf("build nats-server: %v\n%s", err, out)
		}
	})
	if natsBinErr != nil {
		t.Fatal(natsBinErr)
	}
	return natsBin
}

// startNATSProcs starts 3 nats-server processes and waits until JetStream
// has a meta leader; they are killed at the end of the test.
func startNATSProcs(t *testing.T) *natsProcs {
	t.Helper()
	natsServerBin(t) // build it first: a build is no part of any timing
	c := &natsProcs{t: t, dir: t.TempDir()}
	for range 3 {
		c.ports = append(c.ports, testport.Pick(t))
		c.routes = append(c.routes, testport.Pick(t))
	}
	c.cmds = make([]*exec.Cmd, 3)
	c.logs = make([]*os.File, 3)
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
cluster { name: e2e, listen: 127.0.0.1:%d, routes: [%s] }
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
		if t.Failed() {
			for i := range 3 {
				t.Logf("nats-server n%d's log ends:\n%s", i, tail(filepath.Join(c.dir, fmt.Sprintf("n%d.log", i))))
			}
		}
	})
	// JetStream serves once it has a meta leader and knows every peer.
	deadline := time.Now().Add(60 * time.Second)
	for {
		if err := c.jsReady(); err == nil {
			return c
		} else if time.Now().After(deadline) {
			t.Fatalf("nats: JetStream not ready after 60s: %v", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func (c *natsProcs) conf(i int) string { return filepath.Join(c.dir, fmt.Sprintf("n%d.conf", i)) }

func (c *natsProcs) jsReady() error {
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
func (c *natsProcs) URL() string {
	urls := make([]string, len(c.ports))
	for i, p := range c.ports {
		urls[i] = fmt.Sprintf("nats://127.0.0.1:%d", p)
	}
	return strings.Join(urls, ",")
}

// Kill kills server i with SIGKILL (a crash) and waits for it.
func (c *natsProcs) Kill(i int) { c.signal(i, syscall.SIGKILL) }

// Stop stops server i cleanly (SIGTERM: it hands its leaderships over).
func (c *natsProcs) Stop(i int) { c.signal(i, syscall.SIGTERM) }

func (c *natsProcs) signal(i int, sig syscall.Signal) {
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
func (c *natsProcs) Restart(i int) {
	c.t.Helper()
	logf, err := os.OpenFile(filepath.Join(c.dir, fmt.Sprintf("n%d.log", i)), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		c.t.Fatal(err)
	}
	cmd := exec.Command(natsServerBin(c.t), "-c", c.conf(i))
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		c.t.Fatal(err)
	}
	c.mu.Lock()
	c.cmds[i], c.logs[i] = cmd, logf
	c.mu.Unlock()
	deadline := time.Now().Add(30 * time.Second)
	for {
		nc, err := nats.Connect(fmt.Sprintf("nats://127.0.0.1:%d", c.ports[i]), nats.Timeout(time.Second))
		if err == nil {
			nc.Close()
			return
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("nats-server n%d not accepting connections after 30s: %v", i, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

package e2e

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/hostd-dev/hostd/client"
	"github.com/hostd-dev/hostd/host/api"
)

// The helpers every e2e test shares: a hostd subprocess (start, wait for
// readiness, kill, stop), its config and log, the broadcast clients'
// idempotency-key ledger and the paged reads of the final checks.

// daemon is one hostd subprocess.
type daemon struct {
	cmd     *exec.Cmd
	addr    string
	logPath string
	done    chan struct{}
	err     error
}

// readyWithin bounds a start: recovery and compiling plugins take seconds,
// much longer on a loaded 2-core CI machine.
const readyWithin = 90 * time.Second

func freePort(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// writeConfig writes dir/hostd.yaml: the API on addr, data in dir/data,
// the broadcast section with vchannels last (appendConfig may extend it).
func writeConfig(t *testing.T, dir, addr string, vchannels []string) string {
	p := filepath.Join(dir, "hostd.yaml")
	y := fmt.Sprintf("api:\n  listen: %s\ndata:\n  dir: %s\nbroadcast:\n  vchannels: [%s]\n",
		addr, filepath.Join(dir, "data"), strings.Join(vchannels, ", "))
	if err := os.WriteFile(p, []byte(y), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// appendConfig appends YAML text to the config file cfg.
func appendConfig(t *testing.T, cfg, text string) {
	t.Helper()
	f, err := os.OpenFile(cfg, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteString(text); err != nil {
		t.Fatal(err)
	}
}

// start runs hostd with extra environment; its output goes to logPath.
// The test's cleanup kills it if it is still running.
func start(t *testing.T, cfg, addr, logPath string, env ...string) *daemon {
	t.Helper()
	cmd := exec.Command(hostdBin, "serve", "-c", cfg)
	cmd.Env = append(os.Environ(), env...)
	return startCmd(t, cmd, addr, logPath)
}

// startCmd starts cmd (hostd, or a wrapper that runs it) with its output
// appended to logPath; the API is on addr. The test's cleanup kills it if
// it is still running.
func startCmd(t *testing.T, cmd *exec.Cmd, addr, logPath string) *daemon {
	t.Helper()
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	d := &daemon{cmd: cmd, addr: "http://" + addr, logPath: logPath, done: make(chan struct{})}
	go func() {
		d.err = cmd.Wait()
		logf.Close()
		close(d.done)
	}()
	t.Cleanup(func() {
		select {
		case <-d.done:
		default:
			d.kill()
		}
	})
	return d
}

// startReady is start, then waitReady; a daemon that exits instead fails
// the test with the tail of its log.
func startReady(t *testing.T, c *client.Client, cfg, addr, logPath string, env ...string) *daemon {
	t.Helper()
	d := start(t, cfg, addr, logPath, env...)
	if !d.waitReady(t, c) {
		t.Fatalf("hostd exited before it was ready; log:\n%s", tail(logPath))
	}
	return d
}

// waitReady waits for /readyz; false if the process exited first.
func (d *daemon) waitReady(t *testing.T, c *client.Client) bool {
	deadline := time.Now().Add(readyWithin)
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
	d.kill()
	t.Fatalf("hostd not ready after %v; log:\n%s", readyWithin, tail(d.logPath))
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

// tail is the last 4000 bytes of a log file.
func tail(p string) string {
	b, _ := os.ReadFile(p)
	if len(b) > 4000 {
		b = b[len(b)-4000:]
	}
	return string(b)
}

// ledger is the broadcast clients' side: which idempotency keys were
// issued, which wait for a retry, and the ID each acknowledged key got.
type ledger struct {
	format string // of a new key, from a counter: "req-%05d"
	mu     sync.Mutex
	next   int
	retry  []string
	acked  map[string]uint64
	issued map[string]bool
}

func newLedger(format string) *ledger {
	return &ledger{format: format, acked: map[string]uint64{}, issued: map[string]bool{}}
}

// take returns a key to retry, else (with newOK) a new one.
func (l *ledger) take(newOK bool) (string, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if n := len(l.retry); n > 0 {
		k := l.retry[n-1]
		l.retry = l.retry[:n-1]
		return k, true
	}
	if !newOK {
		return "", false
	}
	l.next++
	k := fmt.Sprintf(l.format, l.next)
	l.issued[k] = true
	return k, true
}

// submitters is how runSubmitters submits broadcasts.
type submitters struct {
	workers int
	timeout time.Duration // of one request
	backoff time.Duration // after a failed request
	request func(key string) *client.BroadcastRequest
	counted func() // after each submit, if not nil
}

// runSubmitters submits the ledger's keys until stop closes (or, with
// newOK false, until no key is left); an unanswered request goes back to
// the retry list, as a client retrying with its idempotency key would. A
// key acknowledged with two different IDs fails the test.
func runSubmitters(t *testing.T, c *client.Client, l *ledger, s submitters, stop <-chan struct{}, newOK bool) {
	var wg sync.WaitGroup
	for w := 0; w < s.workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				key, ok := l.take(newOK)
				if !ok {
					return
				}
				ctx, cancel := context.WithTimeout(context.Background(), s.timeout)
				res, err := c.SubmitBroadcast(ctx, s.request(key))
				cancel()
				if s.counted != nil {
					s.counted()
				}
				l.mu.Lock()
				if err == nil && res.State == "TOMBSTONE" && !res.TimedOut {
					if prev, ok := l.acked[key]; ok && prev != res.ID {
						t.Errorf("key %s acknowledged as %d and as %d", key, prev, res.ID)
					}
					l.acked[key] = res.ID
				} else {
					l.retry = append(l.retry, key)
				}
				l.mu.Unlock()
				if err != nil {
					time.Sleep(s.backoff)
				}
			}
		}()
	}
	wg.Wait()
}

// listBroadcasts lists every broadcast task matching f, all pages.
func listBroadcasts(t *testing.T, c *client.Client, f client.BroadcastFilter) []client.BroadcastTask {
	t.Helper()
	var tasks []client.BroadcastTask
	page := client.Page{Limit: 1000}
	for {
		ls, err := c.ListBroadcasts(context.Background(), f, page)
		if err != nil {
			t.Fatal(err)
		}
		tasks = append(tasks, ls.Items...)
		if ls.NextPageToken == "" {
			return tasks
		}
		page.Token = ls.NextPageToken
	}
}

// scanKV calls fn for each entry of plugin's KV under prefix, all pages.
func scanKV(t *testing.T, c *client.Client, plugin, prefix string, fn func(client.PluginKV)) {
	t.Helper()
	page := client.Page{Limit: 1000}
	for {
		ls, err := c.ScanPluginKV(context.Background(), plugin, prefix, page)
		if err != nil {
			t.Fatal(err)
		}
		for _, kv := range ls.Items {
			fn(kv)
		}
		if ls.NextPageToken == "" {
			return
		}
		page.Token = ls.NextPageToken
	}
}

// readAll reads a vchannel from its min to its end.
func readAll(t *testing.T, c *client.Client, vc string, fn func(api.MessageJSON)) {
	t.Helper()
	ctx := context.Background()
	b, err := c.ChannelBounds(ctx, vc)
	if err != nil {
		t.Fatalf("bounds of %s: %v", vc, err)
	}
	from := b.Min
	for from < b.Max {
		res, err := c.ReadChannel(ctx, vc, from, 1000, 0)
		var ce *client.Error
		if errors.As(err, &ce) && ce.Code == "offset_out_of_range" {
			break
		}
		if err != nil {
			t.Fatalf("read %s from %d: %v", vc, from, err)
		}
		for _, m := range res.Messages {
			fn(m)
		}
		if len(res.Messages) == 0 || res.Next <= from {
			break
		}
		from = res.Next
	}
}

package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hostd-dev/hostd/client"
)

func mappingConfig(t *testing.T, dir, listen string) string {
	return writeConfig(t, dir, fmt.Sprintf(`api:
  listen: %s
data:
  dir: %s
mapping:
  brokers:
    - name: a
      labels: {zone: z1}
    - name: b
      labels: {zone: z2}
`, listen, filepath.Join(dir, "data")))
}

// TestTopicCLI runs the topic, channel and group commands against a real
// daemon.
func TestTopicCLI(t *testing.T) {
	dir := t.TempDir()
	d := startDaemon(t, dir, "-c", mappingConfig(t, dir, "127.0.0.1:0"))
	cli := func(args ...string) string {
		t.Helper()
		out, errOut, code := runCLI(t, dir, append([]string{"--addr", d.addr}, args...)...)
		if code != 0 {
			t.Fatalf("hostd %v: exit %d\n%s%s", args, code, out, errOut)
		}
		return out
	}
	cli("topic", "create", "orders", "--queues", "4", "--brokers", "a")
	cli("channel", "append", "orders/0", "one", "two", "-p", "k=v")
	out := cli("topic", "remap", "orders", "--brokers", "a,b", "--dry-run")
	if !strings.Contains(out, "remap") || !strings.Contains(out, "2,3") {
		t.Fatalf("dry run output:\n%s", out)
	}
	cli("topic", "remap", "orders", "--brokers", "b")
	out = cli("channel", "append", "orders/0", "three", "--producer", "p1", "--seq", "1")
	if !strings.Contains(out, "orders/0  3") && !strings.Contains(out, " 3 ") {
		t.Fatalf("append after remap:\n%s", out)
	}
	out = cli("channel", "read", "orders/0", "--from", "0")
	for _, want := range []string{`"one"`, `"two"`, `"three"`, "k=v", "KIND", "data"} {
		if !strings.Contains(out, want) {
			t.Fatalf("read output lacks %s:\n%s", want, out)
		}
	}
	// The remap marker (offset 2) is hidden unless --markers.
	if strings.Contains(out, "topic.remap") || strings.Contains(out, "marker") {
		t.Fatalf("read shows the remap marker without --markers:\n%s", out)
	}
	out = cli("channel", "read", "orders/0", "--from", "0", "--markers")
	for _, want := range []string{`"one"`, `"three"`, "marker:remap", "hostd.message.type=topic.remap"} {
		if !strings.Contains(out, want) {
			t.Fatalf("read --markers lacks %s:\n%s", want, out)
		}
	}
	out = cli("channel", "read", "orders/0", "--from", "2", "--limit", "1", "--markers", "-o", "json")
	if !strings.Contains(out, `"kind":"marker"`) || !strings.Contains(out, `"marker":"remap"`) || !strings.Contains(out, `"offset":2`) {
		t.Fatalf("read --markers -o json:\n%s", out)
	}
	cli("group", "commit", "g1", "orders/0", "2")
	out = cli("group", "lag", "g1", "orders")
	if !strings.Contains(out, "orders/0") || !strings.Contains(out, "true") {
		t.Fatalf("lag:\n%s", out)
	}
	out = cli("topic", "describe", "orders")
	for _, want := range []string{"VCHANNEL", "GEN", "PHYS START..END", "0..3", "open", "GROUP", "g1"} {
		if !strings.Contains(out, want) {
			t.Fatalf("describe lacks %q:\n%s", want, out)
		}
	}
	out = cli("topic", "ls")
	if !strings.Contains(out, "orders") || !strings.Contains(out, "_control") {
		t.Fatalf("ls:\n%s", out)
	}
	out = cli("topic", "offsets", "orders", "--time", time.Now().Add(-time.Hour).Format(time.RFC3339))
	if !strings.Contains(out, "AT TIME") {
		t.Fatalf("offsets:\n%s", out)
	}
	_, errOut, code := runCLI(t, dir, "--addr", d.addr, "topic", "grow", "orders", "--queues", "2")
	if code == 0 || !strings.Contains(errOut, "shrink") {
		t.Fatalf("shrink: exit %d %s", code, errOut)
	}
	_, errOut, code = runCLI(t, dir, "--addr", d.addr, "channel", "read", "orders/0", "--from", "99")
	if code == 0 || !strings.Contains(errOut, "out of range") {
		t.Fatalf("read past max: exit %d %s", code, errOut)
	}
	cli("topic", "delete", "orders")
	d.stop(t)
}

var (
	fpOnce sync.Once
	fpBin  string
	fpErr  error
)

// failpointBinary builds hostd with -tags failpoints once.
func failpointBinary(t *testing.T) string {
	fpOnce.Do(func() {
		fpBin = filepath.Join(filepath.Dir(hostdBin), "hostd-failpoints")
		out, err := exec.Command("go", "build", "-tags", "failpoints", "-o", fpBin, ".").CombinedOutput()
		if err != nil {
			fpErr = fmt.Errorf("%v\n%s", err, out)
		}
	})
	if fpErr != nil {
		t.Fatal(fpErr)
	}
	return fpBin
}

type fpDaemon struct {
	cmd  *exec.Cmd
	done chan struct{}
	mu   sync.Mutex
	logs strings.Builder
}

func startFP(t *testing.T, bin, dir, cfg string, env ...string) *fpDaemon {
	t.Helper()
	d := &fpDaemon{done: make(chan struct{})}
	d.cmd = exec.Command(bin, "serve", "-c", cfg)
	d.cmd.Dir = dir
	d.cmd.Env = cleanEnv(env...)
	pr, pw := io.Pipe()
	d.cmd.Stderr, d.cmd.Stdout = pw, io.Discard
	if err := d.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			d.mu.Lock()
			d.logs.WriteString(sc.Text() + "\n")
			d.mu.Unlock()
		}
	}()
	go func() { _ = d.cmd.Wait(); pw.Close(); close(d.done) }()
	t.Cleanup(func() {
		select {
		case <-d.done:
		default:
			_ = d.cmd.Process.Kill()
			<-d.done
		}
	})
	return d
}

func (d *fpDaemon) Logs() string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.logs.String()
}

func waitReady(t *testing.T, c *client.Client, d *fpDaemon) {
	t.Helper()
	deadline := time.Now().Add(90 * time.Second) // recovery on a loaded CI machine
	for time.Now().Before(deadline) {
		select {
		case <-d.done:
			t.Fatalf("hostd exited:\n%s", d.Logs())
		default:
		}
		ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
		err := c.Ready(ctx)
		cancel()
		if err == nil {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("hostd not ready:\n%s", d.Logs())
}

func freeAddr(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// TestRemapKill9 is mapping.md scenario 9: hostd is SIGKILLed in the
// middle of a remap (at each crash point of the remap's path); after a
// restart the mapping is the old or the new one, never a mix, the
// invariants hold (Open checks them), the remap completes, and every
// logic queue reads as one gap-free sequence.
func TestRemapKill9(t *testing.T) {
	bin := failpointBinary(t)
	points := []string{
		"mapping.remap-planned=crash",        // plan computed, nothing committed
		"broadcast.before-tombstone=crash@2", // the remap's callback result not yet committed
		"broadcast.after-tombstone=crash@2",  // committed with the TOMBSTONE, cache not refreshed
		"wal.before-commit=crash@12",         // create + 10 appends, then the commit that persists the remap with its first appends
		"wal.before-commit=crash@13",         // the first append to the new segment after the remap
	}
	for _, point := range points {
		t.Run(strings.ReplaceAll(point, "=crash", ""), func(t *testing.T) {
			dir := t.TempDir()
			addr := freeAddr(t)
			cfg := mappingConfig(t, dir, addr)
			fplog := filepath.Join(dir, "failpoints.log")
			c, err := client.New("http://" + addr)
			if err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			d := startFP(t, bin, dir, cfg, "HOSTD_FAILPOINTS="+point, "HOSTD_FAILPOINTS_LOG="+fplog)
			waitReady(t, c, d)
			if _, err := c.CreateTopic(ctx, &client.TopicRequest{Topic: "t", Queues: 2, Brokers: []string{"a"}}); err != nil {
				t.Fatal(err)
			}
			appended := map[string]int{}
			appendSome := func(n int) {
				for q := 0; q < 2; q++ {
					vc := fmt.Sprintf("t/%d", q)
					for i := 0; i < n; i++ {
						_, err := c.AppendChannel(ctx, vc, &client.AppendRequest{Records: []client.ChannelRecord{{PayloadText: fmt.Sprintf("%s-%d", vc, appended[vc])}}})
						if err != nil {
							return // the daemon died (wal point)
						}
						appended[vc]++
					}
				}
			}
			appendSome(5)
			_, rerr := c.RemapTopic(ctx, "t", &client.TopicRequest{Brokers: []string{"b"}})
			if rerr == nil {
				appendSome(5) // the crash point is in the appends after the remap
			}
			select {
			case <-d.done:
			case <-time.After(20 * time.Second):
				t.Fatalf("hostd did not crash at %s:\n%s", point, d.Logs())
			}
			hits, _ := os.ReadFile(fplog)
			name := strings.SplitN(point, "=", 2)[0]
			if !strings.Contains(string(hits), name+"\n") {
				t.Fatalf("crash point %s never hit", name)
			}

			d2 := startFP(t, bin, dir, cfg)
			waitReady(t, c, d2)
			// Old or new mapping, never a mix: both queues on one broker.
			ti, err := c.DescribeTopic(ctx, "t")
			if err != nil {
				t.Fatal(err)
			}
			if ti.Queues[0].Broker != ti.Queues[1].Broker {
				t.Fatalf("mixed mapping after restart: %+v", ti.Queues)
			}
			// If the remap was persisted as a broadcast before the crash,
			// recovery finishes it. If the crash came before its persist
			// (wal.before-commit: a task is persisted in the same commit
			// as its first appends), nothing of it is left, its caller
			// saw an error, and a retry completes it.
			l, err := c.ListBroadcasts(ctx, client.BroadcastFilter{Type: "topic.remap"}, client.Page{})
			if err != nil {
				t.Fatal(err)
			}
			if len(l.Items) == 0 {
				if rerr == nil {
					t.Fatalf("the remap was acknowledged but is not persisted")
				}
				if ti.Queues[0].Broker != "a" || ti.Topic.Epoch != 1 {
					t.Fatalf("no remap persisted, yet the mapping changed: epoch %d %+v", ti.Topic.Epoch, ti.Queues)
				}
				if _, err := c.RemapTopic(ctx, "t", &client.TopicRequest{Brokers: []string{"b"}}); err != nil {
					t.Fatalf("retry of the remap: %v", err)
				}
			}
			deadline := time.Now().Add(20 * time.Second)
			for ti.Queues[0].Broker != "b" && time.Now().Before(deadline) {
				time.Sleep(50 * time.Millisecond)
				if ti, err = c.DescribeTopic(ctx, "t"); err != nil {
					t.Fatal(err)
				}
			}
			if ti.Queues[0].Broker != "b" || ti.Queues[1].Broker != "b" || ti.Topic.Epoch != 2 {
				t.Fatalf("remap not completed after restart: epoch %d %+v", ti.Topic.Epoch, ti.Queues)
			}
			appendSome(3)
			for q := 0; q < 2; q++ {
				vc := fmt.Sprintf("t/%d", q)
				rd, err := c.ReadChannel(ctx, vc, 0, 1000, 0)
				if err != nil {
					t.Fatal(err)
				}
				next := 0
				for i, m := range rd.Messages {
					if m.Offset != uint64(i) {
						t.Fatalf("%s: offset %d at position %d", vc, m.Offset, i)
					}
					if m.Properties["hostd.message.type"] != "" {
						continue // the remap marker
					}
					if want := fmt.Sprintf("%s-%d", vc, next); string(m.Payload) != want {
						// An append in flight at the crash may have been
						// committed without its reply: accept it once.
						if string(m.Payload) == fmt.Sprintf("%s-%d", vc, next+1) && next == appended[vc]-3 {
							next++
						} else {
							t.Fatalf("%s offset %d: %q, want %q", vc, m.Offset, m.Payload, want)
						}
					}
					next++
				}
				if next < appended[vc] {
					t.Fatalf("%s: read %d messages, %d acknowledged", vc, next, appended[vc])
				}
			}
			d2cmd := d2.cmd
			_ = d2cmd.Process.Signal(os.Interrupt)
			<-d2.done
		})
	}
}

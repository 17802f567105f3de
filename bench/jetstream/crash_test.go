package jetstream

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/hostd-dev/hostd/internal/testport"
	"github.com/hostd-dev/hostd/runtime/wal"
	"github.com/hostd-dev/hostd/runtime/wal/jswal"
)

// TestReportCrashFailover is TestReportFailover with the stream leader
// killed (SIGKILL) instead of stopped: three nats-server processes, built
// by the test from the nats-server module at the version in go.mod, with
// default election settings and sync_interval always. The pause is from
// the kill to the first append that succeeds through a surviving server
// (wal.AppendOnce: nothing appended twice) — what a hostd leader's appends
// to that queue wait when a NATS machine dies.
func TestReportCrashFailover(t *testing.T) {
	if os.Getenv("HOSTD_BENCH") != "1" {
		t.Skip("set HOSTD_BENCH=1 to measure")
	}
	bin := filepath.Join(t.TempDir(), "nats-server")
	if out, err := exec.Command("go", "build", "-o", bin, "github.com/nats-io/nats-server/v2").CombinedOutput(); err != nil {
		t.Fatalf("build nats-server: %v\n%s", err, out)
	}
	rounds := 3
	if os.Getenv("HOSTD_LONG") == "1" {
		rounds = 7
	}
	var pauses []time.Duration
	for r := 0; r < rounds; r++ {
		pauses = append(pauses, crashOnce(t, bin, r))
	}
	emitPauses(t, fmt.Sprintf("R3 stream leader killed (SIGKILL): append pause, median of %d", rounds),
		"nats-server processes, default election settings, sync_interval always", pauses)
}

// natsProcs starts 3 nats-server processes forming a JetStream cluster.
func natsProcs(t *testing.T, bin string) ([]*exec.Cmd, []string) {
	dir := t.TempDir()
	ports := make([]int, 3)
	routes := make([]int, 3)
	for i := range ports {
		ports[i], routes[i] = testport.Pick(t), testport.Pick(t)
	}
	var cmds []*exec.Cmd
	var urls []string
	for i := range 3 {
		var rs []string
		for j, p := range routes {
			if j != i {
				rs = append(rs, fmt.Sprintf("nats-route://127.0.0.1:%d", p))
			}
		}
		conf := fmt.Sprintf(`server_name: n%d
listen: 127.0.0.1:%d
jetstream { store_dir: %q, sync_interval: always }
cluster { name: crash, listen: 127.0.0.1:%d, routes: [%s] }
`, i, ports[i], filepath.Join(dir, fmt.Sprintf("n%d", i)), routes[i], strings.Join(rs, ", "))
		cf := filepath.Join(dir, fmt.Sprintf("n%d.conf", i))
		if err := os.WriteFile(cf, []byte(conf), 0o644); err != nil {
			t.Fatal(err)
		}
		logf, err := os.Create(filepath.Join(dir, fmt.Sprintf("n%d.log", i)))
		if err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command(bin, "-c", cf)
		cmd.Stdout, cmd.Stderr = logf, logf
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait(); logf.Close() })
		cmds = append(cmds, cmd)
		urls = append(urls, fmt.Sprintf("nats://127.0.0.1:%d", ports[i]))
	}
	return cmds, urls
}

func crashOnce(t *testing.T, bin string, round int) time.Duration {
	ctx := context.Background()
	cmds, urls := natsProcs(t, bin)
	var setup *nats.Conn
	var err error
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		if setup, err = nats.Connect(strings.Join(urls, ",")); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal(err)
		}
	}
	defer setup.Close()
	var l *jswal.Log
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		if l, err = jswal.Open(ctx, jswal.Options{Conn: setup, Replicas: 3, StreamPrefix: "CR"}); err == nil {
			break // the cluster has a JetStream meta leader
		}
		if time.Now().After(deadline) {
			t.Fatal(err)
		}
	}
	const q = "cr/0"
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		if err = l.Create(ctx, q); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal(err)
		}
	}
	if _, err := l.Append(ctx, q, []wal.Record{{Payload: payload, ID: "warm"}}); err != nil {
		t.Fatal(err)
	}
	js, _ := jetstream.New(setup)
	leader := -1
	for lister := js.ListStreams(ctx); ; {
		info, ok := <-lister.Info()
		if !ok {
			break
		}
		if strings.HasPrefix(info.Config.Name, "CR_") {
			fmt.Sscanf(info.Cluster.Leader, "n%d", &leader)
		}
	}
	l.Close()
	if leader < 0 {
		t.Fatal("no stream leader found")
	}
	survivor := (leader + 1) % 3
	nc, err := nats.Connect(urls[survivor])
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	w, err := jswal.Open(ctx, jswal.Options{Conn: nc, Replicas: 3, StreamPrefix: "CR", RequestTimeout: 500 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	low, err := w.NextHint(ctx, q)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if err := cmds[leader].Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	return appendPause(t, w, q, low, fmt.Sprintf("after-%d", round), start, 90*time.Second)
}

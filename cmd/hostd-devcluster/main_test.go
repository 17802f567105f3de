package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/hostd-dev/hostd/internal/syncbuf"
	"github.com/hostd-dev/hostd/internal/testport"
)

// The documented one-command dev cluster, as a user runs it: build hostd
// and this program, start it (3 etcd members, 3 NATS servers, 3 replicas), use the cluster through the CLI, stop it
// with SIGINT and expect a clean exit (every replica stopped, etcd closed).
func TestDevClusterStartsServesAndStops(t *testing.T) {
	if testing.Short() {
		t.Skip("builds two binaries and starts 3 etcd members and 3 replicas")
	}
	bin := t.TempDir()
	for _, b := range [][]string{
		{"-o", filepath.Join(bin, "hostd"), "../hostd"},
		{"-o", filepath.Join(bin, "hostd-devcluster"), "."},
	} {
		if out, err := exec.Command("go", append([]string{"build"}, b...)...).CombinedOutput(); err != nil {
			t.Fatalf("go build %v: %v\n%s", b, err, out)
		}
	}
	dir := t.TempDir()
	ready := filepath.Join(dir, "ready")
	// Ports: blocks of 3 that are free now (etcd peers at +100).
	port, etcdPort, natsPort := freeBlock(t, 3, 0), freeBlock(t, 3, 100), freeBlock(t, 3, 100)
	out := &syncbuf.Buffer{}
	cmd := exec.Command(filepath.Join(bin, "hostd-devcluster"), "-hostd", filepath.Join(bin, "hostd"),
		"-dir", filepath.Join(dir, "state"), "-port", fmt.Sprint(port), "-etcd-port", fmt.Sprint(etcdPort),
		"-nats-port", fmt.Sprint(natsPort),
		"-election-ttl", "2s", "-ready-file", ready)
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
	})
	deadline := time.Now().Add(3 * time.Minute)
	var url string
	for url == "" {
		if b, err := os.ReadFile(ready); err == nil {
			url = strings.TrimSpace(string(b))
			break
		}
		select {
		case err := <-done:
			t.Fatalf("devcluster exited before ready: %v\n%s", err, out.String())
		case <-time.After(200 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("not ready after 3 minutes:\n%s", out.String())
		}
	}
	if !strings.Contains(out.String(), "export HOSTD_ADDR="+url) {
		t.Fatalf("does not print where to point the CLI:\n%s", out.String())
	}
	hostd := func(args ...string) string {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		c := exec.CommandContext(ctx, filepath.Join(bin, "hostd"), append([]string{"--addr", url}, args...)...)
		b, err := c.CombinedOutput()
		if err != nil {
			t.Fatalf("hostd %v: %v\n%s", args, err, b)
		}
		return string(b)
	}
	var st struct {
		Leader  *struct{ Name string }
		Members []struct {
			Name  string
			Ready bool
		}
	}
	if err := json.Unmarshal([]byte(hostd("cluster", "status", "-o", "json")), &st); err != nil {
		t.Fatal(err)
	}
	if st.Leader == nil || len(st.Members) != 3 {
		t.Fatalf("cluster status: %+v", st)
	}
	if got := hostd("broadcast", "send", "noop", "orders/0", "--payload", "hello", "-o", "json"); !strings.Contains(got, "TOMBSTONE") {
		t.Fatalf("broadcast through the dev cluster: %s", got)
	}
	// The vchannels' physical queues are JetStream streams (3 replicas).
	nc, err := nats.Connect(fmt.Sprintf("nats://127.0.0.1:%d", natsPort))
	if err != nil {
		t.Fatal(err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	queues := map[string]int{}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	lister := js.ListStreams(ctx)
	for si := range lister.Info() {
		queues[si.Config.Metadata["hostd_queue"]] = si.Config.Replicas
	}
	cancel()
	nc.Close()
	if err := lister.Err(); err != nil {
		t.Fatal(err)
	}
	if len(queues) == 0 {
		t.Fatalf("no hostd streams on JetStream")
	}
	for q, r := range queues {
		if r != 3 {
			t.Errorf("stream of queue %q has %d replicas, want 3", q, r)
		}
	}
	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("exit after SIGINT: %v\n%s", err, out.String())
		}
	case <-time.After(90 * time.Second):
		t.Fatalf("did not stop within 90s of SIGINT:\n%s", out.String())
	}
}

// freeBlock finds a port p such that p+off, p+off+1, ... p+off+n-1 are
// free now (the dev cluster takes consecutive ports).
func freeBlock(t *testing.T, n, off int) int {
	t.Helper()
	for range 100 {
		p := testport.Pick(t)
		if p+off+n >= 32000 {
			continue
		}
		ok := true
		for i := range n {
			if !free(p + off + i) {
				ok = false
				break
			}
		}
		if ok && (off == 0 || allFree(p, n)) {
			return p
		}
	}
	t.Fatal("no block of free ports")
	return 0
}

func allFree(p, n int) bool {
	for i := range n {
		if !free(p + i) {
			return false
		}
	}
	return true
}

func free(p int) bool {
	l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", p))
	if err != nil {
		return false
	}
	_ = l.Close()
	return true
}

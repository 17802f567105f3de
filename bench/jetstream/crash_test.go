package jetstream

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/hostd-dev/hostd/internal/natstest"
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
	bin, err := natstest.BuildServer(t.TempDir())
	if err != nil {
		t.Fatal(err)
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

func crashOnce(t *testing.T, bin string, round int) time.Duration {
	ctx := context.Background()
	procs := natstest.StartProcs(t, bin)
	var setup *nats.Conn
	var err error
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		if setup, err = nats.Connect(procs.URL()); err == nil {
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
	nc, err := nats.Connect(procs.ServerURL(survivor))
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
	procs.Kill(leader)
	return appendPause(t, w, q, low, fmt.Sprintf("after-%d", round), start, 90*time.Second)
}

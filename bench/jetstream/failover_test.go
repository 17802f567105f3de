package jetstream

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/hostd-dev/hostd/bench/report"
	"github.com/hostd-dev/hostd/internal/natstest"
	"github.com/hostd-dev/hostd/runtime/wal"
	"github.com/hostd-dev/hostd/runtime/wal/jswal"
)

// TestReportFailover measures the pause of appends to an R3 queue whose
// JetStream stream leader is stopped: from the stop to the first append
// that succeeds (through wal.AppendOnce, so nothing is appended twice),
// with nats-server's default election settings. The client is connected
// to a server that stays up, so the figure is JetStream's re-election, not
// the client's reconnect.
func TestReportFailover(t *testing.T) {
	if os.Getenv("HOSTD_BENCH") != "1" {
		t.Skip("set HOSTD_BENCH=1 to measure")
	}
	rounds := 3
	if os.Getenv("HOSTD_LONG") == "1" {
		rounds = 7
	}
	var pauses []time.Duration
	for r := 0; r < rounds; r++ {
		pauses = append(pauses, failoverOnce(t, r))
	}
	emitPauses(t, fmt.Sprintf("R3 stream leader stopped: append pause, median of %d", rounds),
		"default election settings, sync_interval always", pauses)
}

// emitPauses reports the median of pauses as a row, every round in the note.
func emitPauses(t *testing.T, figure, note string, pauses []time.Duration) {
	t.Helper()
	sort.Slice(pauses, func(i, j int) bool { return pauses[i] < pauses[j] })
	strs := make([]string, len(pauses))
	for i, p := range pauses {
		strs[i] = p.Round(10 * time.Millisecond).String()
	}
	if err := report.Emit(t.Logf, report.Row{Bench: "jetstream", Figure: figure,
		Value: float64(pauses[len(pauses)/2].Milliseconds()), Unit: "ms",
		Note: "every round: " + strings.Join(strs, ", ") + "; " + note}); err != nil {
		t.Fatal(err)
	}
}

// appendPause appends one record to q through w (wal.AppendOnce from low:
// never twice) until it succeeds and returns the time since start.
func appendPause(t *testing.T, w *jswal.Log, q string, low uint64, id string, start time.Time, limit time.Duration) time.Duration {
	t.Helper()
	for i := 0; ; i++ {
		actx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		_, err := wal.AppendOnce(actx, w, q, low, []wal.Record{{Payload: payload, ID: id}})
		cancel()
		if err == nil {
			return time.Since(start)
		}
		if time.Since(start) > limit {
			t.Fatalf("no append within %v: %v", limit, err)
		}
		if i == 0 && !errors.Is(err, context.DeadlineExceeded) {
			t.Logf("first error: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func failoverOnce(t *testing.T, round int) time.Duration {
	ctx := context.Background()
	c := natstest.Start(t, natstest.Options{Servers: 3, SyncAlways: true})
	defer c.StopAll()
	setup := c.Conn(t)
	l, err := jswal.Open(ctx, jswal.Options{Conn: setup, Replicas: 3, StreamPrefix: "FO"})
	if err != nil {
		t.Fatal(err)
	}
	const q = "fo/0"
	// A fresh cluster has a meta leader before every peer is known: R3
	// creates fail with "no suitable peers" for a moment.
	for deadline := time.Now().Add(30 * time.Second); ; {
		err := l.Create(ctx, q)
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal(err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if _, err := l.Append(ctx, q, []wal.Record{{Payload: payload, ID: "warm"}}); err != nil {
		t.Fatal(err)
	}
	js, _ := jetstream.New(setup)
	var leader int = -1
	for lister := js.ListStreams(ctx); ; {
		info, ok := <-lister.Info()
		if !ok {
			break
		}
		if strings.HasPrefix(info.Config.Name, "FO_") {
			fmt.Sscanf(info.Cluster.Leader, "n%d", &leader)
		}
	}
	l.Close()
	if leader < 0 {
		t.Fatal("no stream leader found")
	}
	survivor := (leader + 1) % 3
	nc, err := nats.Connect(c.Server(survivor).ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	w, err := jswal.Open(ctx, jswal.Options{Conn: nc, Replicas: 3, StreamPrefix: "FO", RequestTimeout: 500 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	low, err := w.NextHint(ctx, q)
	if err != nil {
		t.Fatal(err)
	}
	setup.Close()
	start := time.Now()
	c.Stop(leader)
	return appendPause(t, w, q, low, fmt.Sprintf("after-%d", round), start, 60*time.Second)
}

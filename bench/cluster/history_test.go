package clusterbench

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hostd-dev/hostd/bench/baseline"
	"github.com/hostd-dev/hostd/bench/report"
	"github.com/hostd-dev/hostd/client"
	"github.com/hostd-dev/hostd/host/cluster"
	"github.com/hostd-dev/hostd/host/config"
	"github.com/hostd-dev/hostd/internal/etcdtest"
)

// errFilled stops the fill once n broadcasts were sent.
var errFilled = errors.New("filled")

// TestReportTakeoverWithHistory: does a new leader pay for history? Three
// replicas on etcd retain HOSTD_BENCH_TOMBSTONES (default 100,000)
// finished broadcasts as tombstones (the idempotency window,
// broadcast.tombstones.max_count raised to keep them all), submitted by
// 64 clients; then the leader stops cleanly (it resigns) and the figure is
// the time to the first broadcast acknowledged through a survivor — beside
// the same handover measured before any history was written, in the same
// run. A crash adds the election TTL on top (TestClusterLeaderKills).
//
//	cd bench && HOSTD_BENCH=1 go test ./cluster -run TestReportTakeoverWithHistory -v -timeout 30m
func TestReportTakeoverWithHistory(t *testing.T) {
	if os.Getenv("HOSTD_BENCH") != "1" {
		t.Skip("set HOSTD_BENCH=1 to measure")
	}
	n := 100_000
	if v, err := strconv.Atoi(os.Getenv("HOSTD_BENCH_TOMBSTONES")); err == nil && v > 0 {
		n = v
	}
	etcd := etcdtest.Start(t, etcdtest.Options{Members: 3})
	keep := func(c *config.Config) {
		c.Broadcast.Tombstones.MaxCount = 2 * n
		c.Broadcast.Tombstones.MaxLifetime = 24 * time.Hour
	}
	var nodes []*cluster.Node
	for i := range 3 {
		nodes = append(nodes, replica(t, etcd.Endpoints(), fmt.Sprintf("r%d", i), keep))
	}
	stopped := map[*cluster.Node]bool{}
	t.Cleanup(func() {
		for _, nd := range nodes {
			if !stopped[nd] {
				ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
				_ = nd.Shutdown(ctx)
				cancel()
			}
		}
	})
	handover := func() (time.Duration, *cluster.Node) {
		lead := leader(t, nodes, nil)
		var survivor *cluster.Node
		for _, nd := range nodes {
			if nd != lead && !stopped[nd] {
				survivor = nd
				break
			}
		}
		sc, _ := client.New(survivor.URL(), client.WithRetries(1))
		t0 := time.Now()
		done := make(chan struct{})
		go func() {
			defer close(done)
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			_ = lead.Shutdown(ctx)
		}()
		for submit(sc) != nil {
			if time.Since(t0) > 5*time.Minute {
				t.Fatal("no broadcast through a survivor within 5 min of the leader's stop")
			}
			time.Sleep(10 * time.Millisecond)
		}
		d := time.Since(t0)
		<-done
		stopped[lead] = true
		return d, lead
	}
	empty, first := handover()
	t.Logf("handover with no history: %v (%s stopped)", empty.Round(time.Millisecond), first.Name())

	lead := leader(t, nodes, nil)
	c, err := client.New(lead.URL(), client.WithRetries(3))
	if err != nil {
		t.Fatal(err)
	}
	var sent atomic.Int64
	start := time.Now()
	fill, err := baseline.Run("fill", 64, 24*time.Hour, func(int) error {
		if sent.Add(1) > int64(n) {
			return errFilled
		}
		return submit(c)
	})
	if err != nil && !errors.Is(err, errFilled) {
		t.Fatal(err)
	}
	t.Logf("%d broadcasts retained in %v (%.0f/s)", n, time.Since(start).Round(time.Second), fill.Rate())
	full, second := handover()
	t.Logf("handover with %d tombstones: %v (%s stopped)", n, full.Round(time.Millisecond), second.Name())
	if err := report.Emit(t.Logf, report.Row{
		Bench: "cluster", Figure: fmt.Sprintf("handover (clean leader stop → first broadcast through a survivor) with %d retained tombstones", n),
		Value: float64(full.Milliseconds()), Unit: "ms",
		Baseline: "the same handover with no history, same run", BaseVal: float64(empty.Milliseconds()), BaseUnit: "ms",
		Note: fmt.Sprintf("history written by 64 clients at %.0f broadcasts/s; a crash adds cluster.election_ttl", fill.Rate()),
	}); err != nil {
		t.Fatal(err)
	}
}

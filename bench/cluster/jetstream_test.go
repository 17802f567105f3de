package clusterbench

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/hostd-dev/hostd/bench/baseline"
	"github.com/hostd-dev/hostd/bench/report"
	"github.com/hostd-dev/hostd/client"
	"github.com/hostd-dev/hostd/host/cluster"
	"github.com/hostd-dev/hostd/host/config"
	"github.com/hostd-dev/hostd/internal/etcdtest"
	"github.com/hostd-dev/hostd/internal/natstest"
)

// jsVChannels are the 4 vchannels every broadcast of TestReportJetStream
// goes to.
var jsVChannels = []string{"orders/0", "orders/1", "orders/2", "orders/3"}

// TestReportJetStream: three replicas on a 3-member etcd with their
// physical queues on a 3-server JetStream cluster (R3 streams, file
// storage, sync_interval always): broadcasts/s to 4 vchannels through the
// leader from 1, 16 and 64 clients, beside raw JetStream publishes of the
// same 4 messages (one per stream, R3, awaited together) at the same
// concurrency on the same servers.
func TestReportJetStream(t *testing.T) {
	if os.Getenv("HOSTD_BENCH") != "1" {
		t.Skip("set HOSTD_BENCH=1 to measure")
	}
	d := seconds()
	etcd := etcdtest.Start(t, etcdtest.Options{Members: 3})
	nc := natstest.Start(t, natstest.Options{Servers: 3, SyncAlways: true})
	var nodes []*cluster.Node
	for i := range 3 {
		nodes = append(nodes, replica(t, etcd.Endpoints(), fmt.Sprintf("r%d", i), func(c *config.Config) {
			c.WAL.Backend = config.WALJetStream
			c.WAL.JetStream.URL = nc.URL()
			c.WAL.JetStream.Replicas = 3
			c.Broadcast.Vchannels = jsVChannels
		}))
	}
	t.Cleanup(func() {
		for _, n := range nodes {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			_ = n.Shutdown(ctx)
			cancel()
		}
	})
	lead := leader(t, nodes, nil)
	c, err := client.New(lead.URL(), client.WithRetries(1))
	if err != nil {
		t.Fatal(err)
	}
	send := func() error {
		res, err := c.SubmitBroadcast(context.Background(), &client.BroadcastRequest{Type: "noop", PayloadText: payload,
			VChannels: jsVChannels, Timeout: "10s"})
		if err != nil {
			return err
		}
		if res.State != "TOMBSTONE" {
			return fmt.Errorf("broadcast %d: %s", res.ID, res.State)
		}
		return nil
	}
	for range 20 { // warm up
		if err := send(); err != nil {
			t.Fatal(err)
		}
	}
	// Raw: 4 R3 streams like hostd's, one message of the same payload to
	// each per operation, published asynchronously and awaited together.
	js, err := jetstream.New(nc.Conn(t))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for i := range jsVChannels {
		if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: fmt.Sprintf("RAW%d", i), Subjects: []string{fmt.Sprintf("raw.%d", i)},
			Replicas: 3, Storage: jetstream.FileStorage}); err != nil {
			t.Fatal(err)
		}
	}
	body := make([]byte, len(payload)+200) // the payload plus hostd's record properties, roughly
	var rows []report.Row
	for _, workers := range []int{1, 16, 64} {
		hostd, err := baseline.Run("hostd broadcast, 4 vchannels on JetStream", workers, d, func(int) error { return send() })
		if err != nil {
			t.Fatal(err)
		}
		raw, err := baseline.Run("raw JetStream R3 publish x4", workers, d, func(int) error {
			futs := make([]jetstream.PubAckFuture, len(jsVChannels))
			for i := range jsVChannels {
				f, err := js.PublishAsync(fmt.Sprintf("raw.%d", i), body)
				if err != nil {
					return err
				}
				futs[i] = f
			}
			for _, f := range futs {
				select {
				case <-f.Ok():
				case err := <-f.Err():
					return err
				case <-time.After(10 * time.Second):
					return fmt.Errorf("publish ack timeout")
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%v\n%v", hostd, raw)
		rows = append(rows, report.Row{
			Bench: "cluster-jetstream", Figure: fmt.Sprintf("broadcast through the leader (noop, 4 vchannels on JetStream R3), %d client(s)", workers),
			Value: hostd.Rate(), Unit: "broadcasts/s",
			Baseline: "raw JetStream R3 publish of 4 messages (one per stream), same concurrency", BaseVal: raw.Rate(), BaseUnit: "ops/s",
			Note: fmt.Sprintf("p50 %s p99 %s (raw p50 %s p99 %s); cpu/op %s incl. etcd and NATS in process",
				hostd.P50.Round(time.Microsecond), hostd.P99.Round(time.Microsecond),
				raw.P50.Round(time.Microsecond), raw.P99.Round(time.Microsecond), hostd.CPUPerOp().Round(time.Microsecond)),
		})
	}
	if err := report.Emit(t.Logf, rows...); err != nil {
		t.Fatal(err)
	}
}

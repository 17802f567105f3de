package host

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/hostd-dev/hostd/client"
	"github.com/hostd-dev/hostd/host/config"
	"github.com/hostd-dev/hostd/internal/natstest"
)

// TestJetStreamWAL: wal.backend jetstream with the embedded catalog. A
// broadcast to two vchannels, a topic with a producer-idempotent append
// and a remap go through the daemon's API; the physical queues are
// JetStream streams (none in the catalog); after a restart on the same
// data dir and NATS the messages read back at the same offsets and a
// retried producer append answers with its original position.
func TestJetStreamWAL(t *testing.T) {
	nc := natstest.Start(t, natstest.Options{SyncAlways: true})
	cfg := testConfig(t)
	cfg.WAL.Backend = config.WALJetStream
	cfg.WAL.JetStream.URL = nc.URL()
	cfg.WAL.JetStream.Replicas = 1
	cfg.Broadcast.Vchannels = []string{"orders/0", "orders/1"}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	open := func() (*Host, *client.Client) {
		h, err := Open(ctx, cfg, Options{Logger: quietLogger(), WrapAPI: specCheck(t)})
		if err != nil {
			t.Fatal(err)
		}
		if err := h.Start(ctx); err != nil {
			t.Fatal(err)
		}
		c, err := client.New(h.URL())
		if err != nil {
			t.Fatal(err)
		}
		if err := c.WaitReady(ctx, 50*time.Millisecond); err != nil {
			t.Fatal(err)
		}
		return h, c
	}
	h, c := open()
	res, err := c.SubmitBroadcast(ctx, &client.BroadcastRequest{Type: "noop", PayloadText: "hello",
		VChannels: []string{"orders/0", "orders/1"}, Timeout: "30s"})
	if err != nil || res.State != "TOMBSTONE" {
		t.Fatalf("broadcast: %+v %v", res, err)
	}
	if _, err := c.CreateTopic(ctx, &client.TopicRequest{Topic: "t", Queues: 2}); err != nil {
		t.Fatal(err)
	}
	app := &client.AppendRequest{ProducerID: "p1", Seq: 1, Records: []client.ChannelRecord{{PayloadText: "one"}, {PayloadText: "two"}}}
	first, err := c.AppendChannel(ctx, "t/0", app)
	if err != nil || len(first.Positions) != 2 {
		t.Fatalf("append: %+v %v", first, err)
	}
	if _, err := c.RemapTopic(ctx, "t", &client.TopicRequest{}); err != nil {
		t.Fatalf("remap: %v", err)
	}
	third, err := c.AppendChannel(ctx, "t/0", &client.AppendRequest{ProducerID: "p1", Seq: 2, Records: []client.ChannelRecord{{PayloadText: "three"}}})
	if err != nil {
		t.Fatal(err)
	}
	if third.Positions[0].Offset <= first.Positions[1].Offset {
		t.Fatalf("append after the remap at %d, not after %d", third.Positions[0].Offset, first.Positions[1].Offset)
	}

	// The queues are streams on JetStream.
	js, err := jetstream.New(nc.Conn(t))
	if err != nil {
		t.Fatal(err)
	}
	queues := map[string]bool{}
	lister := js.ListStreams(ctx)
	for si := range lister.Info() {
		queues[si.Config.Metadata["hostd_queue"]] = true
	}
	if err := lister.Err(); err != nil {
		t.Fatal(err)
	}
	if len(queues) < 4 { // _control, orders/0, orders/1, t's segments
		t.Fatalf("JetStream holds streams for %v: too few", queues)
	}
	if err := h.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}

	// Restart: the same messages at the same offsets; the retried
	// producer append is a duplicate with its original positions.
	h, c = open()
	defer func() {
		if err := h.Shutdown(context.Background()); err != nil {
			t.Error(err)
		}
	}()
	read, err := c.ReadChannel(ctx, "t/0", 0, 10, 0)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, m := range read.Messages {
		if m.Kind == "data" {
			got = append(got, fmt.Sprintf("%s@%d", m.Payload, m.Offset))
		}
	}
	want := []string{
		fmt.Sprintf("one@%d", first.Positions[0].Offset), fmt.Sprintf("two@%d", first.Positions[1].Offset),
		fmt.Sprintf("three@%d", third.Positions[0].Offset),
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("t/0 after restart: %v, want %v", got, want)
	}
	again, err := c.AppendChannel(ctx, "t/0", app)
	if err != nil || !again.Duplicate || again.Positions[0].Offset != first.Positions[0].Offset {
		t.Fatalf("retried producer append after restart: %+v %v, want duplicate at %d", again, err, first.Positions[0].Offset)
	}
	bc, err := c.GetBroadcast(ctx, res.ID)
	if err != nil || bc.State != "TOMBSTONE" {
		t.Fatalf("broadcast after restart: %+v %v", bc, err)
	}
	for _, vc := range []string{"orders/0", "orders/1"} {
		r, err := c.ReadChannel(ctx, vc, 0, 10, 0)
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, m := range r.Messages {
			if m.Kind == "broadcast" && string(m.Payload) == "hello" {
				n++
			}
		}
		if n != 1 {
			t.Fatalf("%s holds the broadcast %d times, want once", vc, n)
		}
	}
}

package host

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/hostd-dev/hostd/client"
	"github.com/hostd-dev/hostd/host/config"
	"github.com/hostd-dev/hostd/internal/wasmtest"
	"github.com/hostd-dev/hostd/runtime/wal"
)

func startMappingHost(t *testing.T) *client.Client {
	t.Helper()
	cfg := testConfig(t)
	cfg.Mapping.Brokers = []config.MappingBroker{{Name: "a"}, {Name: "b"}, {Name: "c"}}
	h := startHost(t, cfg)
	c, err := client.New(h.URL())
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func apiCode(err error) string {
	var ce *client.Error
	if errors.As(err, &ce) {
		return ce.Code
	}
	return ""
}

// TestTopicLifecycleAPI drives create → append → remap (a broadcast) →
// read across segments → groups → grow → delete through the HTTP API.
func TestTopicLifecycleAPI(t *testing.T) {
	c := startMappingHost(t)
	ctx := context.Background()
	ch, err := c.CreateTopic(ctx, &client.TopicRequest{Topic: "orders", Queues: 6})
	if err != nil || ch.BroadcastID == 0 || ch.Info == nil || len(ch.Info.Queues) != 6 {
		t.Fatalf("create: %+v %v", ch, err)
	}
	counts := map[string]int{}
	for _, q := range ch.Info.Queues {
		counts[q.Broker]++
	}
	if counts["a"] != 2 || counts["b"] != 2 || counts["c"] != 2 {
		t.Fatalf("placement %v", counts)
	}
	if _, err := c.CreateTopic(ctx, &client.TopicRequest{Topic: "orders", Queues: 6}); apiCode(err) != "already_exists" {
		t.Fatalf("create twice: %v", err)
	}
	for i := 0; i < 10; i++ {
		if _, err := c.AppendChannel(ctx, "orders/0", &client.AppendRequest{Records: []client.ChannelRecord{{PayloadText: fmt.Sprint(i)}}}); err != nil {
			t.Fatal(err)
		}
	}
	dry, err := c.RemapTopic(ctx, "orders", &client.TopicRequest{Brokers: []string{"b", "c"}, DryRun: true})
	if err != nil || len(dry.Moved) != 2 || dry.BroadcastID != 0 {
		t.Fatalf("dry run: %+v %v", dry, err)
	}
	rm, err := c.RemapTopic(ctx, "orders", &client.TopicRequest{Brokers: []string{"b", "c"}})
	if err != nil || len(rm.Moved) != 2 || rm.Epoch != 2 || rm.BroadcastID == 0 {
		t.Fatalf("remap: %+v %v", rm, err)
	}
	// Queue 0 was on a: it moved. The remap broadcast left a marker in it.
	res, err := c.AppendChannel(ctx, "orders/0", &client.AppendRequest{Records: []client.ChannelRecord{{PayloadText: "after"}}, ProducerID: "p", Seq: 1})
	if err != nil || res.Positions[0].Offset != 11 {
		t.Fatalf("append after remap: %+v %v", res, err)
	}
	again, err := c.AppendChannel(ctx, "orders/0", &client.AppendRequest{Records: []client.ChannelRecord{{PayloadText: "after"}}, ProducerID: "p", Seq: 1})
	if err != nil || !again.Duplicate || again.Positions[0].Offset != 11 {
		t.Fatalf("producer retry: %+v %v", again, err)
	}
	rd, err := c.ReadChannel(ctx, "orders/0", 0, 100, 0)
	if err != nil || len(rd.Messages) != 12 || rd.Next != 12 {
		t.Fatalf("read: %d %v", len(rd.Messages), err)
	}
	if rd.Messages[10].Properties["hostd.message.type"] != "topic.remap" || string(rd.Messages[11].Payload) != "after" ||
		rd.Messages[10].Queue == rd.Messages[11].Queue {
		t.Fatalf("marker/segments: %+v %+v", rd.Messages[10], rd.Messages[11])
	}
	if m := rd.Messages[10]; m.Kind != "marker" || m.Marker != "remap" {
		t.Fatalf("the remap marker is not marked: kind %q marker %q", m.Kind, m.Marker)
	}
	for i, m := range rd.Messages {
		if i != 10 && (m.Kind != "data" || m.Marker != "") {
			t.Fatalf("message %d: kind %q marker %q, want data", i, m.Kind, m.Marker)
		}
	}
	// Long-poll read wakes on an append.
	got := make(chan *client.ReadResult, 1)
	go func() {
		r, _ := c.ReadChannel(ctx, "orders/0", 12, 10, 10*time.Second)
		got <- r
	}()
	time.Sleep(50 * time.Millisecond)
	if _, err := c.AppendChannel(ctx, "orders/0", &client.AppendRequest{Records: []client.ChannelRecord{{PayloadText: "late"}}}); err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-got:
		if r == nil || len(r.Messages) != 1 || r.Messages[0].Offset != 12 {
			t.Fatalf("long poll: %+v", r)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("long poll did not return")
	}
	if _, err := c.ReadChannel(ctx, "orders/0", 99, 10, 0); apiCode(err) != "offset_out_of_range" {
		t.Fatalf("read past max: %v", err)
	}
	if _, err := c.CommitGroupOffset(ctx, "g1", "orders/0", 5); err != nil {
		t.Fatal(err)
	}
	lag, err := c.GroupLag(ctx, "g1", "orders")
	if err != nil || len(lag) != 6 || lag[0].Lag != 8 || !lag[0].Committed {
		t.Fatalf("lag: %+v %v", lag, err)
	}
	if _, err := c.CommitGroupOffset(ctx, "g1", "orders/0", 500); apiCode(err) != "offset_out_of_range" {
		t.Fatalf("commit past max: %v", err)
	}
	if _, err := c.GrowTopic(ctx, "orders", &client.TopicRequest{Queues: 3}); apiCode(err) != "invalid_argument" {
		t.Fatalf("shrink: %v", err)
	}
	if _, err := c.RemapTopic(ctx, "orders", &client.TopicRequest{Brokers: []string{"zz"}}); apiCode(err) != "invalid_argument" {
		t.Fatalf("unknown broker: %v", err)
	}
	if _, err := c.RemapTopic(ctx, "orders", &client.TopicRequest{Policy: "nope"}); apiCode(err) != "invalid_argument" {
		t.Fatalf("unknown policy: %v", err)
	}
	gr, err := c.GrowTopic(ctx, "orders", &client.TopicRequest{Queues: 8})
	if err != nil || gr.Epoch != 3 || len(gr.Info.Queues) != 8 {
		t.Fatalf("grow: %+v %v", gr, err)
	}
	ti, err := c.DescribeTopic(ctx, "orders")
	if err != nil || len(ti.Queues[0].Segments) != 2 || len(ti.Groups) != 1 {
		t.Fatalf("describe: %+v %v", ti, err)
	}
	offs, err := c.TopicOffsets(ctx, "orders", time.Now().Add(-time.Hour))
	if err != nil || len(offs) != 8 || offs[0].Max != 13 || *offs[0].AtTime != 0 {
		t.Fatalf("offsets: %+v %v", offs, err)
	}
	l, err := c.ListTopics(ctx, client.Page{})
	if err != nil || len(l.Items) != 2 { // _control and orders
		t.Fatalf("list: %+v %v", l, err)
	}
	if _, err := c.DeleteTopic(ctx, "orders"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.DescribeTopic(ctx, "orders"); apiCode(err) != "not_found" {
		t.Fatalf("describe deleted: %v", err)
	}
	// Broadcasts resolve through the mapping: the control channel is _control/0.
	b, err := c.SubmitBroadcast(ctx, &client.BroadcastRequest{Type: "noop"})
	if err != nil || b.State != "TOMBSTONE" || b.Appends[0].PhysicalQueue == "_control/0" {
		t.Fatalf("broadcast through the mapping: %+v %v", b, err)
	}
}

// TestZoneSpreadPolicyPlugin creates and remaps a topic with the
// zone-spread plugin policy (a real Wasm plugin run by runtime/wasm).
func TestZoneSpreadPolicyPlugin(t *testing.T) {
	wasmPath := wasmtest.Build(t, "../plugins/zone-spread")
	cfg := testConfig(t)
	// The plugin's name differs from its policy's, so the error below
	// must name the plugin through runtime/wasm's PolicyPlugin lookup.
	cfg.Plugins.List = []config.Plugin{{Name: "zones", Path: wasmPath}}
	cfg.Mapping.Brokers = []config.MappingBroker{
		{Name: "a", Labels: map[string]string{"zone": "z1"}}, {Name: "b", Labels: map[string]string{"zone": "z1"}},
		{Name: "c", Labels: map[string]string{"zone": "z2"}}, {Name: "d", Labels: map[string]string{"zone": "z2"}},
		{Name: "nolabel"},
	}
	h := startHost(t, cfg)
	c, err := client.New(h.URL())
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	ch, err := c.CreateTopic(ctx, &client.TopicRequest{Topic: "z", Queues: 8, Policy: "zone-spread", Brokers: []string{"a", "b", "c", "d"}})
	if err != nil {
		t.Fatal(err)
	}
	zones := map[string]int{}
	for _, q := range ch.Info.Queues {
		zones[map[string]string{"a": "z1", "b": "z1", "c": "z2", "d": "z2"}[q.Broker]]++
	}
	if zones["z1"] != 4 || zones["z2"] != 4 || ch.Info.Topic.Policy != "zone-spread" {
		t.Fatalf("zone spread: %v (policy %s)", zones, ch.Info.Topic.Policy)
	}
	rm, err := c.RemapTopic(ctx, "z", &client.TopicRequest{Brokers: []string{"a", "c"}})
	if err != nil || len(rm.Moved) != 4 {
		t.Fatalf("remap with the topic's policy: %+v %v", rm, err)
	}
	_, err = c.RemapTopic(ctx, "z", &client.TopicRequest{Brokers: []string{"a", "nolabel"}})
	if apiCode(err) != "failed_precondition" || !strings.Contains(err.Error(), "policy zone-spread of plugin zones") {
		t.Fatalf("policy error must name the plugin: %v", err)
	}
	t.Logf("policy error: %v", err)
	// Errors about the policy's output (checked by the mapping, not the
	// plugin) carry the policy's Source: it must name the plugin too.
	if src := (pluginPolicy{h: h, name: "zone-spread"}).Source(); src != "policy zone-spread of plugin zones" {
		t.Fatalf("Source() = %q", src)
	}
}

// TestAppendsDuringBroadcastRemap: appends to the moved queues while
// remaps run as broadcasts (ack callback committing the mapping with the
// TOMBSTONE): none lost, none duplicated, per-producer order kept.
func TestAppendsDuringBroadcastRemap(t *testing.T) {
	cfg := testConfig(t)
	cfg.Mapping.Brokers = []config.MappingBroker{{Name: "a"}, {Name: "b"}}
	h := startHost(t, cfg)
	c, err := client.New(h.URL())
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := c.CreateTopic(ctx, &client.TopicRequest{Topic: "t", Queues: 1, Brokers: []string{"a"}}); err != nil {
		t.Fatal(err)
	}
	m := h.Mapping()
	stop := make(chan struct{})
	type result struct {
		n   int
		err error
	}
	results := make(chan result, 4)
	for g := 0; g < 4; g++ {
		go func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					results <- result{n: i}
					return
				default:
				}
				if _, err := m.Append(ctx, "t/0", []wal.Record{{Payload: []byte(fmt.Sprintf("%d/%d", g, i))}}); err != nil {
					results <- result{n: i, err: err}
					return
				}
			}
		}()
	}
	for _, b := range []string{"b", "a", "b"} {
		time.Sleep(20 * time.Millisecond)
		if _, err := c.RemapTopic(ctx, "t", &client.TopicRequest{Brokers: []string{b}}); err != nil {
			t.Fatal(err)
		}
	}
	close(stop)
	total := 0
	for g := 0; g < 4; g++ {
		r := <-results
		if r.err != nil {
			t.Fatal(r.err)
		}
		total += r.n
	}
	rd, err := c.ReadChannel(ctx, "t/0", 0, 1000, 0)
	for err == nil && rd.Next < rd.Max {
		var more *client.ReadResult
		more, err = c.ReadChannel(ctx, "t/0", rd.Next, 1000, 0)
		if err == nil {
			rd.Messages = append(rd.Messages, more.Messages...)
			rd.Next = more.Next
		}
	}
	if err != nil {
		t.Fatal(err)
	}
	last := map[int]int{0: -1, 1: -1, 2: -1, 3: -1}
	n := 0
	for i, msg := range rd.Messages {
		if msg.Offset != uint64(i) {
			t.Fatalf("gap: position %d has offset %d", i, msg.Offset)
		}
		if msg.Properties["hostd.message.type"] != "" {
			continue // remap markers
		}
		var g, k int
		fmt.Sscanf(string(msg.Payload), "%d/%d", &g, &k)
		if k != last[g]+1 {
			t.Fatalf("producer %d: %d after %d", g, k, last[g])
		}
		last[g] = k
		n++
	}
	if n != total {
		t.Fatalf("acknowledged %d appends, read %d", total, n)
	}
	ti, _ := c.DescribeTopic(ctx, "t")
	if len(ti.Queues[0].Segments) != 4 {
		t.Fatalf("segments %d, want 4", len(ti.Queues[0].Segments))
	}
}

// The hostd. property namespace is refused on every client write path
// with 400 invalid_argument naming the property, and nothing is written;
// what hostd writes reads back with its kind.
func TestReservedPropertiesRefused(t *testing.T) {
	c := startMappingHost(t)
	ctx := context.Background()
	if _, err := c.CreateTopic(ctx, &client.TopicRequest{Topic: "t", Queues: 1}); err != nil {
		t.Fatal(err)
	}
	for _, prop := range []string{"hostd.broadcast.id", "hostd.broadcast.epoch", "hostd.message.type", "hostd.anything"} {
		req := &client.AppendRequest{Records: []client.ChannelRecord{{PayloadText: "ok"},
			{PayloadText: "forged", Properties: map[string]string{"app": "1", prop: "1"}}}}
		_, err := c.AppendChannel(ctx, "t/0", req)
		var ce *client.Error
		if !errors.As(err, &ce) || ce.Status != 400 || ce.Code != "invalid_argument" ||
			ce.Details["property"] != prop || ce.Details["field"] != "records[1].properties" {
			t.Fatalf("append with %s: %#v", prop, err)
		}
		req.ProducerID, req.Seq = "p", 1
		if _, err := c.AppendChannel(ctx, "t/0", req); apiCode(err) != "invalid_argument" {
			t.Fatalf("producer append with %s: %v", prop, err)
		}
		_, err = c.SubmitBroadcast(ctx, &client.BroadcastRequest{Type: "noop", Properties: map[string]string{prop: "1"}})
		if !errors.As(err, &ce) || ce.Code != "invalid_argument" || ce.Details["property"] != prop {
			t.Fatalf("broadcast with %s: %#v", prop, err)
		}
	}
	if b, err := c.ChannelBounds(ctx, "t/0"); err != nil || b.Max != 0 {
		t.Fatalf("refused appends wrote something: %+v %v", b, err)
	}
	if _, err := c.AppendChannel(ctx, "t/0", &client.AppendRequest{Records: []client.ChannelRecord{
		{PayloadText: "fine", Properties: map[string]string{"hostd": "x", "app.hostd.id": "y"}}}}); err != nil {
		t.Fatalf("look-alike properties are data: %v", err)
	}
	b, err := c.SubmitBroadcast(ctx, &client.BroadcastRequest{Type: "noop", VChannels: []string{"t/0"}})
	if err != nil || b.State != "TOMBSTONE" {
		t.Fatalf("broadcast: %+v %v", b, err)
	}
	rd, err := c.ReadChannel(ctx, "t/0", 0, 10, 0)
	if err != nil || len(rd.Messages) != 2 || rd.Messages[0].Kind != "data" || rd.Messages[1].Kind != "broadcast" || rd.Messages[1].Marker != "" {
		t.Fatalf("read kinds: %+v %v", rd, err)
	}
}

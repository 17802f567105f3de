package host

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/hostd-dev/hostd/client"
	"github.com/hostd-dev/hostd/host/config"
	"github.com/hostd-dev/hostd/runtime/catalog"
	"github.com/hostd-dev/hostd/runtime/wal"
)

// TestTranslateAPI translates every logic offset of a queue remapped by a
// broadcast to its physical place and back, through the HTTP API and the
// Go client, and checks each error's code and details.
func TestTranslateAPI(t *testing.T) {
	c := startMappingHost(t)
	ctx := context.Background()
	if _, err := c.CreateTopic(ctx, &client.TopicRequest{Topic: "orders", Queues: 2, Brokers: []string{"a"}}); err != nil {
		t.Fatal(err)
	}
	app := func(vc string, n int) {
		for i := 0; i < n; i++ {
			if _, err := c.AppendChannel(ctx, vc, &client.AppendRequest{Records: []client.ChannelRecord{{PayloadText: fmt.Sprint(i)}}}); err != nil {
				t.Fatal(err)
			}
		}
	}
	app("orders/0", 3)
	if _, err := c.RemapTopic(ctx, "orders", &client.TopicRequest{Brokers: []string{"b"}}); err != nil {
		t.Fatal(err)
	}
	app("orders/0", 2)
	// Offsets 0..2 on a, 3 = the remap marker (last of the old segment),
	// 4..5 on b.
	rd, err := c.ReadChannel(ctx, "orders/0", 0, 100, 0)
	if err != nil || len(rd.Messages) != 6 {
		t.Fatalf("read: %+v %v", rd, err)
	}
	for _, m := range rd.Messages {
		tr, err := c.TranslateLogic(ctx, "orders/0", m.Offset)
		if err != nil {
			t.Fatalf("translate %d: %v", m.Offset, err)
		}
		if tr.PhysicalQueue != m.Queue || tr.PhysicalOffset != m.QueueOffset || tr.Broker != strings.Split(m.Queue, "/")[0] ||
			!tr.Retained || tr.Max != 6 || tr.Segment.Open != (tr.Broker == "b") {
			t.Fatalf("translate %d: %+v, read says %s@%d", m.Offset, tr, m.Queue, m.QueueOffset)
		}
		back, err := c.TranslatePhysical(ctx, tr.Broker, tr.QueueID, tr.PhysicalOffset)
		if err != nil || back.VChannel != "orders/0" || back.LogicOffset != m.Offset || back.Topic != "orders" || back.Queue != 0 {
			t.Fatalf("back from %s@%d: %+v %v", tr.PhysicalQueue, tr.PhysicalOffset, back, err)
		}
	}

	var ce *client.Error
	_, err = c.TranslateLogic(ctx, "orders/0", 6)
	if !errors.As(err, &ce) || ce.Code != "offset_out_of_range" || ce.Status != 416 || ce.Details["max"] != float64(6) || ce.Details["min"] != float64(0) {
		t.Fatalf("logic at max: %v", err)
	}
	if _, err := c.TranslateLogic(ctx, "nope/0", 0); apiCode(err) != "not_found" {
		t.Fatalf("unknown topic: %v", err)
	}
	if _, err := c.TranslateLogic(ctx, "orders/9", 0); apiCode(err) != "not_found" {
		t.Fatalf("unknown queue: %v", err)
	}
	lead, _ := c.TranslateLogic(ctx, "orders/0", 5)
	_, err = c.TranslatePhysical(ctx, "b", lead.QueueID, 2)
	if !errors.As(err, &ce) || ce.Code != "offset_out_of_range" || ce.Details["physical_queue"] != lead.PhysicalQueue || ce.Details["max"] != float64(2) {
		t.Fatalf("physical past the leader: %v", err)
	}
	if _, err := c.TranslatePhysical(ctx, "c", lead.QueueID, 0); apiCode(err) != "not_found" {
		t.Fatalf("unmapped physical queue: %v", err)
	}

	// The request decoder's errors, through raw HTTP.
	for _, tc := range []struct{ path, field string }{
		{"/v1/topics/orders/queues/0/translate", "logic_offset"},
		{"/v1/topics/orders/queues/0/translate?logic_offset=-1", "logic_offset"},
		{"/v1/topics/orders/queues/0/translate?logic_offset=1&logic_offset=2", "logic_offset"},
		{"/v1/topics/orders/queues/0/translate?logic_offset=1&physical_offset=2", "physical_offset"},
		{"/v1/topics/orders/queues/00/translate?logic_offset=1", "queue"},
		{"/v1/topics/orders/queues/+1/translate?logic_offset=1", "queue"},
		{"/v1/topics/or%20ders/queues/0/translate?logic_offset=1", "topic"},
		{"/v1/brokers/a/queues/1/translate", "physical_offset"},
		{"/v1/brokers/a/queues/x/translate?physical_offset=1", "queue"},
		{"/v1/brokers/a%21/queues/1/translate?physical_offset=1", "broker"},
		{"/v1/brokers/a/queues/1/translate?logic_offset=1", "logic_offset"},
	} {
		resp, err := http.Get(c.Addr() + tc.path)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		var env struct {
			Error struct {
				Code    string         `json:"code"`
				Message string         `json:"message"`
				Details map[string]any `json:"details"`
			} `json:"error"`
		}
		if err := json.Unmarshal(b, &env); err != nil || resp.StatusCode != 400 || env.Error.Code != "invalid_argument" ||
			env.Error.Details["field"] != tc.field || env.Error.Message == "" {
			t.Errorf("GET %s: %d %s (want invalid_argument on %s)", tc.path, resp.StatusCode, b, tc.field)
		}
	}
}

// TestDeleteRecreateForgetsGroupOffsetsAPI: a topic deleted through the
// API (a topic.delete broadcast whose ack callback commits the delete with
// the TOMBSTONE) takes its consumer group offsets with it; the same name
// created again starts with no committed offsets.
func TestDeleteRecreateForgetsGroupOffsetsAPI(t *testing.T) {
	c := startMappingHost(t)
	ctx := context.Background()
	if _, err := c.CreateTopic(ctx, &client.TopicRequest{Topic: "t", Queues: 2}); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 4; i++ {
		if _, err := c.AppendChannel(ctx, "t/0", &client.AppendRequest{Records: []client.ChannelRecord{{PayloadText: "x"}}}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.CommitGroupOffset(ctx, "g", "t/0", 3); err != nil {
		t.Fatal(err)
	}
	// A malformed vchannel is invalid_argument; a well-formed unknown one not_found.
	if _, err := c.GetGroupOffset(ctx, "g", "t"); apiCode(err) != "invalid_argument" {
		t.Fatalf("group offset of a malformed vchannel: %v", err)
	}
	if _, err := c.CommitGroupOffset(ctx, "g", "t/01", 0); apiCode(err) != "invalid_argument" {
		t.Fatalf("commit to a malformed vchannel: %v", err)
	}
	if _, err := c.GetGroupOffset(ctx, "g", "t/7"); apiCode(err) != "not_found" {
		t.Fatalf("group offset of an unknown queue: %v", err)
	}
	dry, err := c.DeleteTopicDryRun(ctx, "t")
	if err != nil || !dry.DryRun || dry.BroadcastID != 0 {
		t.Fatalf("delete dry run: %+v %v", dry, err)
	}
	if g, err := c.GetGroupOffset(ctx, "g", "t/0"); err != nil || !g.Committed {
		t.Fatalf("after a dry run the offset stays: %+v %v", g, err)
	}
	if _, err := c.DeleteTopic(ctx, "t"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.GetGroupOffset(ctx, "g", "t/0"); apiCode(err) != "not_found" {
		t.Fatalf("group offset of a deleted topic: %v", err)
	}
	if _, err := c.CreateTopic(ctx, &client.TopicRequest{Topic: "t", Queues: 2}); err != nil {
		t.Fatal(err)
	}
	g, err := c.GetGroupOffset(ctx, "g", "t/0")
	if err != nil || g.Committed || g.Offset != 0 || g.Lag != 0 {
		t.Fatalf("old offset leaked into the new topic: %+v %v", g, err)
	}
	if ti, err := c.DescribeTopic(ctx, "t"); err != nil || len(ti.Groups) != 0 {
		t.Fatalf("describe of the new topic: %+v %v", ti, err)
	}
}

// TestDeleteBroadcastRacingGroupCommits: consumers keep committing offsets
// while the topic is deleted by a topic.delete broadcast; afterwards no
// offset of the topic is left in the catalog (the ack callback's
// RangeCheck re-runs the delete if a commit slipped in after its read).
func TestDeleteBroadcastRacingGroupCommits(t *testing.T) {
	cfg := testConfig(t)
	cfg.Mapping.Brokers = []config.MappingBroker{{Name: "a"}}
	h := startHost(t, cfg)
	c, err := client.New(h.URL())
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	m := h.Mapping()
	for round := 0; round < 3; round++ {
		if _, err := c.CreateTopic(ctx, &client.TopicRequest{Topic: "t", Queues: 2}); err != nil {
			t.Fatal(err)
		}
		if _, err := m.Append(ctx, "t/0", []wal.Record{{Payload: []byte("x")}}); err != nil {
			t.Fatal(err)
		}
		errs := make(chan error, 4)
		for g := 0; g < 4; g++ {
			go func() {
				for i := 0; ; i++ {
					err := m.CommitOffset(ctx, fmt.Sprint("g", g), fmt.Sprint("t/", g%2), uint64(i%2)*uint64(1-g%2))
					if errors.Is(err, wal.ErrNoChannel) {
						errs <- nil // the topic is gone
						return
					}
					if err != nil {
						errs <- err
						return
					}
				}
			}()
		}
		time.Sleep(5 * time.Millisecond)
		if _, err := c.DeleteTopic(ctx, "t"); err != nil {
			t.Fatal(err)
		}
		for g := 0; g < 4; g++ {
			if err := <-errs; err != nil {
				t.Fatalf("round %d: commit: %v", round, err)
			}
		}
		n := 0
		err := h.Catalog().View(ctx, func(r catalog.Reader) error {
			return r.Scan([]byte(catalog.NSMapping+"o/t\x00"), []byte(catalog.NSMapping+"o/t\x01"), func(catalog.KV) error { n++; return nil })
		})
		if err != nil || n != 0 {
			t.Fatalf("round %d: %d group offsets outlived the delete (%v)", round, n, err)
		}
	}
}

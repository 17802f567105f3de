package host

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/hostd-dev/hostd/client"
	"github.com/hostd-dev/hostd/internal/syncbuf"
)

func startBroadcastHost(t *testing.T) (*Host, *client.Client, *syncbuf.Buffer) {
	t.Helper()
	cfg := testConfig(t)
	cfg.Broadcast.Vchannels = []string{"orders/0", "orders/1"}
	logs := &syncbuf.Buffer{}
	h, err := Open(context.Background(), cfg, Options{Logger: slog.New(slog.NewTextHandler(logs, nil)), WrapAPI: specCheck(t)})
	if err != nil {
		t.Fatal(err)
	}
	if err := h.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := h.Shutdown(context.Background()); err != nil {
			t.Error(err)
		}
	})
	c, err := client.New(h.URL())
	if err != nil {
		t.Fatal(err)
	}
	return h, c, logs
}

func TestBroadcastAPI(t *testing.T) {
	h, c, logs := startBroadcastHost(t)
	ctx := context.Background()
	req := &client.BroadcastRequest{Type: "noop", PayloadText: "hello", VChannels: []string{"orders/0", "orders/1"},
		ResourceKeys: []client.ResourceKey{{Domain: "collection", Key: "db.orders", Mode: "exclusive"}}, IdempotencyKey: "r1"}
	res, err := c.SubmitBroadcast(ctx, req)
	if err != nil || res.State != "TOMBSTONE" || res.Duplicate || len(res.Appends) != 3 {
		t.Fatalf("submit: %+v %v", res, err)
	}
	dup, err := c.SubmitBroadcast(ctx, req)
	if err != nil || !dup.Duplicate || dup.ID != res.ID {
		t.Fatalf("duplicate: %+v %v", dup, err)
	}
	task, err := c.GetBroadcast(ctx, res.ID)
	if err != nil || task.State != "TOMBSTONE" || len(task.VChannels) != 3 || task.ResourceKeys[0].Mode == "" || task.TraceID == "" {
		t.Fatalf("get: %+v %v", task, err)
	}
	// ack_sync_up through the API.
	yes := true
	r2, err := c.SubmitBroadcast(ctx, &client.BroadcastRequest{Type: "noop", VChannels: []string{"orders/0"}, AckSyncUp: &yes, Wait: "appended"})
	if err != nil || r2.State != "PENDING" {
		t.Fatalf("ack_sync_up submit: %+v %v", r2, err)
	}
	if _, err := c.AckBroadcast(ctx, r2.ID, "nope/0"); !client.HasCode(err, "invalid_argument") {
		t.Fatalf("ack of a non-target: %v", err)
	}
	if _, err := c.AckBroadcast(ctx, r2.ID, "orders/0"); err != nil {
		t.Fatal(err)
	}
	// Listing with filters and pagination.
	for i := 0; i < 3; i++ {
		if _, err := c.SubmitBroadcast(ctx, &client.BroadcastRequest{Type: "noop"}); err != nil {
			t.Fatal(err)
		}
	}
	l, err := c.ListBroadcasts(ctx, client.BroadcastFilter{State: "TOMBSTONE"}, client.Page{Limit: 2})
	if err != nil || len(l.Items) != 2 || l.NextPageToken == "" {
		t.Fatalf("list page 1: %+v %v", l, err)
	}
	l2, err := c.ListBroadcasts(ctx, client.BroadcastFilter{State: "TOMBSTONE"}, client.Page{Limit: 2, Token: l.NextPageToken})
	if err != nil || len(l2.Items) == 0 || l2.Items[0].ID <= l.Items[1].ID {
		t.Fatalf("list page 2: %+v %v", l2, err)
	}
	if _, err := c.AbandonBroadcast(ctx, res.ID, "test"); !client.HasCode(err, "conflict") {
		t.Fatalf("abandon of a TOMBSTONE: %v", err)
	}
	if _, err := c.GetBroadcast(ctx, 99999); !client.IsNotFound(err) {
		t.Fatalf("get unknown: %v", err)
	}
	// Metrics are exported.
	resp, err := http.Get(h.URL() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(body), "hostd_broadcast_tasks") {
		t.Fatalf("no broadcast metrics in /metrics")
	}
	if strings.Contains(logs.String(), "panic") {
		t.Fatalf("recovered panic in the log:\n%s", logs.String())
	}
}

// Bad input gets a 4xx with a stable code and persists nothing.
func TestBroadcastBadInput(t *testing.T) {
	h, c, logs := startBroadcastHost(t)
	long := strings.Repeat("k", 257)
	big := strings.Repeat("x", 1<<20+1)
	cases := []struct {
		name   string
		body   string
		status int
		code   string
	}{
		{"malformed json", `{"type": "noop",`, 400, "invalid_argument"},
		{"not an object", `[1,2]`, 400, "invalid_argument"},
		{"unknown field", `{"type":"noop","bogus":1}`, 400, "invalid_argument"},
		{"missing type", `{}`, 400, "invalid_argument"},
		{"unknown type", `{"type":"NoSuchType"}`, 400, "invalid_argument"},
		{"nonexistent vchannel", `{"type":"noop","vchannels":["ghost/0"]}`, 400, "invalid_argument"},
		{"empty vchannel", `{"type":"noop","vchannels":[""]}`, 400, "invalid_argument"},
		{"empty resource key", `{"type":"noop","resource_keys":[{"domain":"","key":"x"}]}`, 400, "invalid_argument"},
		{"bad mode", `{"type":"noop","resource_keys":[{"domain":"d","key":"x","mode":"both"}]}`, 400, "invalid_argument"},
		{"overlong idempotency key", `{"type":"noop","idempotency_key":"` + long + `"}`, 400, "invalid_argument"},
		{"bad wait", `{"type":"noop","wait":"forever"}`, 400, "invalid_argument"},
		{"bad timeout", `{"type":"noop","timeout":"soon"}`, 400, "invalid_argument"},
		{"bad scope", `{"type":"noop","scope":{"kind":"galaxy"}}`, 400, "invalid_argument"},
		{"oversized payload", `{"type":"noop","payload_text":"` + big + `"}`, 413, "too_large"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			resp, err := http.Post(h.URL()+"/v1/broadcasts", "application/json", strings.NewReader(tc.body))
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			var e struct {
				Error struct {
					Code    string `json:"code"`
					Message string `json:"message"`
				} `json:"error"`
			}
			json.NewDecoder(resp.Body).Decode(&e)
			if resp.StatusCode != tc.status || e.Error.Code != tc.code || e.Error.Message == "" {
				t.Fatalf("got %d %+v, want %d %s", resp.StatusCode, e.Error, tc.status, tc.code)
			}
		})
	}
	for _, p := range []string{"/v1/broadcasts/abc", "/v1/broadcasts/0"} {
		resp, err := http.Get(h.URL() + p)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 400 {
			t.Fatalf("GET %s: %d", p, resp.StatusCode)
		}
	}
	l, err := c.ListBroadcasts(context.Background(), client.BroadcastFilter{}, client.Page{})
	if err != nil || len(l.Items) != 0 {
		t.Fatalf("bad input persisted tasks: %+v %v", l, err)
	}
	if strings.Contains(strings.ToLower(logs.String()), "panic") {
		t.Fatalf("recovered panic in the log:\n%s", logs.String())
	}
}

// TestConfiguredVChannelTopicsCannotBeDeleted: deleting a topic behind
// broadcast.vchannels would make every broadcast to it fail until a
// restart recreated it (found by FuzzAPI); it is refused with a stable
// code, and broadcasts keep working.
func TestConfiguredVChannelTopicsCannotBeDeleted(t *testing.T) {
	_, c, _ := startBroadcastHost(t)
	ctx := context.Background()
	_, err := c.DeleteTopic(ctx, "orders")
	var ae *client.Error
	if !errors.As(err, &ae) || ae.Status/100 != 4 || !strings.Contains(ae.Message, "broadcast.vchannels") {
		t.Fatalf("delete of a configured topic: %v", err)
	}
	res, err := c.SubmitBroadcast(ctx, &client.BroadcastRequest{Type: "noop", VChannels: []string{"orders/0", "orders/1"}})
	if err != nil || res.State != "TOMBSTONE" {
		t.Fatalf("broadcast after the refused delete: %+v %v", res, err)
	}
	// Other topics can still be deleted.
	if _, err := c.CreateTopic(ctx, &client.TopicRequest{Topic: "scratch", Queues: 1}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.DeleteTopic(ctx, "scratch"); err != nil {
		t.Fatalf("delete of an unpinned topic: %v", err)
	}
}

// A broadcast whose task record can never fit one catalog value (under
// max_payload, but with a large property) is refused with 413 naming the
// limit, before any lock: an exclusive cluster broadcast right after it
// is not blocked by it.
func TestBroadcastRecordTooLarge(t *testing.T) {
	h, c, _ := startBroadcastHost(t)
	body := `{"type":"noop","payload_text":"` + strings.Repeat("x", 400<<10) + `","properties":{"p":"` + strings.Repeat("y", 500<<10) + `"},"timeout":"30s"}`
	resp, err := http.Post(h.URL()+"/v1/broadcasts", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var e struct {
		ID    uint64 `json:"id"`
		Error struct {
			Code    string         `json:"code"`
			Details map[string]any `json:"details"`
		} `json:"error"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&e); err != nil {
		t.Fatal(err)
	}
	d := e.Error.Details
	if resp.StatusCode != 413 || e.Error.Code != "too_large" || e.ID != 0 ||
		d["limit"] != float64(1<<20) || d["limit_option"] == nil || d["size"] == nil || d["what"] == nil {
		t.Fatalf("got %d %+v", resp.StatusCode, e)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	res, err := c.SubmitBroadcast(ctx, &client.BroadcastRequest{Type: "noop",
		ResourceKeys: []client.ResourceKey{{Domain: "cluster", Key: "cluster", Mode: "exclusive"}}})
	if err != nil || res.State != "TOMBSTONE" {
		t.Fatalf("exclusive cluster broadcast after a refused one: %+v %v", res, err)
	}
}

// GET /v1/broadcast-locks shows who holds a key (broadcast IDs) and who
// waits; a broadcast that gives up waiting gets 504 naming the key it
// waited for and its holder.
func TestBroadcastLocksAPI(t *testing.T) {
	_, c, _ := startBroadcastHost(t)
	ctx := context.Background()
	evil := []client.ResourceKey{{Domain: "evil", Key: "k13", Mode: "exclusive"}}
	yes := true
	a, err := c.SubmitBroadcast(ctx, &client.BroadcastRequest{Type: "noop", VChannels: []string{"orders/0"}, AckSyncUp: &yes,
		ResourceKeys: evil, Wait: "appended"})
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.SubmitBroadcast(ctx, &client.BroadcastRequest{Type: "noop", ResourceKeys: evil, Timeout: "300ms"})
	var ae *client.Error
	if !errors.As(err, &ae) || ae.Status != 504 || ae.Details["waiting_for"] != "evil:k13" ||
		!strings.Contains(ae.Message, "evil:k13") || strings.Contains(ae.Message, "cluster:cluster") {
		t.Fatalf("blocked broadcast: %v (%+v)", err, ae)
	}
	if hs, _ := ae.Details["holders"].([]any); len(hs) != 1 || hs[0] != float64(a.ID) {
		t.Fatalf("holders: %+v", ae.Details)
	}
	done := make(chan error, 1)
	go func() {
		_, err := c.SubmitBroadcast(ctx, &client.BroadcastRequest{Type: "noop", ResourceKeys: evil, Timeout: "2m"})
		done <- err
	}()
	var locks []client.BroadcastLock
	deadline := time.Now().Add(time.Minute)
	for {
		locks, err = c.BroadcastLocks(ctx, "evil", "k13")
		if err != nil {
			t.Fatal(err)
		}
		if len(locks) == 1 && len(locks[0].Waiters) == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("never saw the waiter: %+v", locks)
		}
		time.Sleep(5 * time.Millisecond)
	}
	l := locks[0]
	if l.Mode != "exclusive" || len(l.Holders) != 1 || l.Holders[0].BroadcastID != a.ID || l.Holders[0].Mode != "exclusive" ||
		!l.Waiters[0].BlockedHere || l.Waiters[0].Type != "noop" {
		t.Fatalf("evil:k13: %+v", l)
	}
	all, err := c.BroadcastLocks(ctx, "", "")
	if err != nil || len(all) != 2 || all[0].Domain != "cluster" {
		t.Fatalf("all keys: %+v %v", all, err)
	}
	if _, err := c.BroadcastLocks(ctx, "", "k13"); !errors.As(err, &ae) || ae.Status != 400 {
		t.Fatalf("key without domain: %v", err)
	}
	if _, err := c.AckBroadcast(ctx, a.ID, "orders/0"); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatalf("waiter after the ack: %v", err)
	}
}

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hostd-dev/hostd/client"
	"github.com/hostd-dev/hostd/host/api"
)

var crashPoints = []string{
	"broadcast.after-persist",
	"broadcast.mid-append",
	"broadcast.after-acks",
	"broadcast.mid-callback",
	"broadcast.before-tombstone",
	"broadcast.after-tombstone",
}

var vchannels = []string{"orders/0", "orders/1", "orders/2"}

// request is the broadcast a client sends for key: a noop, or with the
// collections plugin a CreateDatabase whose effect (a KV record with a
// fresh id) shows whether it was applied exactly once.
func request(key string) *client.BroadcastRequest {
	n, _ := strconv.Atoi(strings.TrimPrefix(key, "req-"))
	typ, payload := "noop", key
	if useCollections {
		typ, payload = "CreateDatabase", fmt.Sprintf(`{"name":"d%05d"}`, n)
	}
	return &client.BroadcastRequest{Type: typ, PayloadText: payload, VChannels: vchannels, IdempotencyKey: key,
		ResourceKeys: []client.ResourceKey{{Domain: "collection", Key: fmt.Sprint("c", n%5), Mode: "exclusive"}},
		Timeout:      "5s"}
}

// runClients submits with six clients until stop closes (see
// runSubmitters).
func runClients(t *testing.T, c *client.Client, l *ledger, stop <-chan struct{}, newOK bool) {
	runSubmitters(t, c, l, submitters{workers: 6, timeout: 6 * time.Second, backoff: 5 * time.Millisecond, request: request}, stop, newOK)
}

var useCollections bool

// TestCrashLoop: a stream of idempotent broadcasts, hostd SIGKILLed at
// random moments and at every named crash point, restarted each time. At
// the end every acknowledged broadcast is TOMBSTONE exactly once, every
// key maps to one task, no lock is held, no vchannel holds a message twice.
func TestCrashLoop(t *testing.T) {
	t.Run("noop", func(t *testing.T) { useCollections = false; crashLoop(t, 12, 0) })
	// The plugin run arms the points around the callback and its commit.
	t.Run("collections", func(t *testing.T) { useCollections = true; crashLoop(t, 8, 2) })
}

func crashLoop(t *testing.T, rounds, firstPoint int) {
	if long() {
		rounds *= 8
	}
	dir := t.TempDir()
	addr := freePort(t)
	cfg := writeConfig(t, dir, addr, vchannels)
	if useCollections {
		appendConfig(t, cfg, fmt.Sprintf("plugins:\n  list:\n    - name: collections\n      path: %s\n", collectionsWasm(t)))
	}
	logPath := filepath.Join(dir, "hostd.log")
	fpLog := filepath.Join(dir, "failpoints.log")
	c, err := client.New("http://" + addr)
	if err != nil {
		t.Fatal(err)
	}
	l := newLedger("req-%05d")
	rnd := rand.New(rand.NewSource(time.Now().UnixNano()))
	armed := map[string]int{}
	for round := 0; round < rounds; round++ {
		env := []string{"HOSTD_FAILPOINTS_LOG=" + fpLog}
		point := ""
		if round%2 == 0 {
			point = crashPoints[(firstPoint+round/2)%len(crashPoints)]
			env = append(env, fmt.Sprintf("HOSTD_FAILPOINTS=%s=crash@%d", point, 2+rnd.Intn(15)))
		}
		d := start(t, cfg, addr, logPath, env...)
		stop := make(chan struct{})
		clientsDone := make(chan struct{})
		if d.waitReady(t, c) {
			go func() {
				runClients(t, c, l, stop, true)
				close(clientsDone)
			}()
		} else {
			close(clientsDone)
		}
		if point != "" {
			select {
			case <-d.done:
				armed[point]++
			case <-time.After(8 * time.Second):
				d.kill() // the point was not reached this round
			}
		} else {
			time.Sleep(time.Duration(50+rnd.Intn(400)) * time.Millisecond)
			d.kill()
		}
		close(stop)
		<-clientsDone
	}
	// Final start: finish every unacknowledged request.
	d := startReady(t, c, cfg, addr, logPath, "HOSTD_FAILPOINTS_LOG="+fpLog)
	stop := make(chan struct{})
	runClients(t, c, l, stop, false)
	ctx := context.Background()
	if len(l.acked) != len(l.issued) {
		t.Fatalf("%d keys issued, %d acknowledged", len(l.issued), len(l.acked))
	}
	ids := map[uint64]string{}
	for key, id := range l.acked {
		if other, dup := ids[id]; dup {
			t.Fatalf("keys %s and %s share broadcast %d", key, other, id)
		}
		ids[id] = key
		res, err := c.SubmitBroadcast(ctx, request(key))
		if err != nil || !res.Duplicate || res.ID != id || res.State != "TOMBSTONE" {
			t.Fatalf("retry of %s: %+v %v (want duplicate of %d)", key, res, err, id)
		}
	}
	// Exactly one task per key, all TOMBSTONE.
	tasks := listBroadcasts(t, c, client.BroadcastFilter{})
	if len(tasks) != len(l.acked) {
		t.Fatalf("%d tasks for %d keys", len(tasks), len(l.acked))
	}
	for _, tk := range tasks {
		if tk.State != "TOMBSTONE" || ids[tk.ID] == "" {
			t.Fatalf("task %+v", tk)
		}
	}
	if useCollections {
		checkCollections(t, c, len(l.acked))
	}
	// No lock left held: an exclusive cluster key conflicts with every task.
	res, err := c.SubmitBroadcast(ctx, &client.BroadcastRequest{Type: "noop", Timeout: "5s",
		ResourceKeys: []client.ResourceKey{{Domain: "cluster", Key: "cluster", Mode: "exclusive"}}})
	if err != nil || res.State != "TOMBSTONE" {
		t.Fatalf("a lock is still held: %+v %v", res, err)
	}
	checkChannels(t, c, len(l.acked)+1)
	d.stop(t)
	hits, _ := os.ReadFile(fpLog)
	for _, p := range crashPoints {
		if !strings.Contains(string(hits), p+"\n") {
			t.Errorf("crash point %s never hit", p)
		}
	}
	if b, _ := os.ReadFile(logPath); strings.Contains(string(b), "panic") {
		t.Errorf("panic in the daemon log:\n%s", tail(logPath))
	}
	t.Logf("%d rounds, %d broadcasts acknowledged, crashes at points: %v", rounds, len(l.acked), armed)
}

// checkChannels reads every vchannel through the API (the consumers'
// view): no broadcast twice, every broadcast on the control channel.
func checkChannels(t *testing.T, c *client.Client, want int) {
	for _, vc := range append([]string{"_control/0"}, vchannels...) {
		seen := map[string]bool{}
		readAll(t, c, vc, func(m api.MessageJSON) {
			id := m.Properties["hostd.broadcast.id"]
			if id == "" {
				return // not a broadcast message
			}
			if seen[id] {
				t.Fatalf("vchannel %s holds broadcast %s twice", vc, id)
			}
			seen[id] = true
		})
		if vc == "_control/0" && len(seen) != want {
			t.Fatalf("control channel holds %d broadcasts, want %d", len(seen), want)
		}
	}
}

// checkCollections: every CreateDatabase applied exactly once — one
// record per key and the plugin's ids exactly 1..n (a second application
// would consume an id or fail the task).
func checkCollections(t *testing.T, c *client.Client, n int) {
	ids := map[int]bool{}
	scanKV(t, c, "collections", "db/", func(kv client.PluginKV) {
		var rec struct {
			ID int `json:"id"`
		}
		if err := json.Unmarshal(kv.Value, &rec); err != nil {
			t.Fatalf("%s: %v", kv.Key, err)
		}
		if ids[rec.ID] {
			t.Fatalf("id %d used twice", rec.ID)
		}
		ids[rec.ID] = true
	})
	if len(ids) != n {
		t.Fatalf("%d databases for %d acknowledged requests", len(ids), n)
	}
	for i := 1; i <= n; i++ {
		if !ids[i] {
			t.Fatalf("id %d missing: an effect was applied twice or lost (ids %v)", i, ids)
		}
	}
}

package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
	"go.uber.org/goleak"

	"github.com/hostd-dev/hostd/client"
	"github.com/hostd-dev/hostd/host"
	"github.com/hostd-dev/hostd/host/config"
	"github.com/hostd-dev/hostd/internal/apispec"
	"github.com/hostd-dev/hostd/internal/etcdtest"
	"github.com/hostd-dev/hostd/internal/syncbuf"
	"github.com/hostd-dev/hostd/runtime/catalog"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// replicaConfig is one replica's config against etcd at endpoints.
func replicaConfig(t *testing.T, endpoints []string, name, prefix string) *config.Config {
	t.Helper()
	cfg := config.Default()
	cfg.API.Listen = "127.0.0.1:0"
	cfg.API.ShutdownTimeout = 5 * time.Second
	cfg.API.RequestTimeout = 5 * time.Second
	cfg.Data.Dir = t.TempDir()
	cfg.Plugins.InitTimeout = 2 * time.Minute
	cfg.Catalog.Backend = config.CatalogEtcd
	cfg.Catalog.Etcd.Endpoints = endpoints
	cfg.Catalog.Etcd.Prefix = prefix
	cfg.Cluster.NodeName = name
	cfg.Cluster.ElectionTTL = 2 * time.Second
	return &cfg
}

type replica struct {
	*Node
	logs *syncbuf.Buffer
	stop func()
}

// startReplica opens and starts one replica; it is shut down at cleanup
// (or by its stop). Every exchange with its front server is checked
// against docs/openapi.json.
func startReplica(t *testing.T, cfg *config.Config) *replica {
	t.Helper()
	logs := &syncbuf.Buffer{}
	spec := apispec.MustLoad()
	n, err := Open(context.Background(), cfg, Options{
		Logger:  slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelInfo})),
		WrapAPI: func(h http.Handler) http.Handler { return spec.Handler(t, false, h) },
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := n.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	r := &replica{Node: n, logs: logs}
	r.stop = func() {
		once.Do(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			if err := n.Shutdown(ctx); err != nil {
				t.Errorf("shutdown %s: %v", n.Name(), err)
			}
		})
	}
	t.Cleanup(r.stop)
	return r
}

func clientOf(t *testing.T, r *replica) *client.Client {
	t.Helper()
	c, err := client.New(r.URL())
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// waitLeader waits until every replica in rs reports the same leader, one
// of rs, whose term has started, and returns it.
func waitLeader(t *testing.T, rs []*replica) (*replica, int64) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		var name string
		var term int64
		agree := true
		for _, r := range rs {
			r.mu.Lock()
			li := r.leader
			r.mu.Unlock()
			if li == nil || (name != "" && (li.Name != name || li.term != term)) {
				agree = false
				break
			}
			name, term = li.Name, li.term
		}
		if agree {
			for _, r := range rs {
				if r.Name() == name && len(r.notReady()) == 0 {
					return r, term
				}
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("no agreed, ready leader among %d replicas in 60s", len(rs))
	return nil, 0
}

// The whole story in one etcd: three replicas elect one leader; any
// replica serves the API (followers forward); /v1/cluster shows all
// three; a leader that stops resigns and another takes over with
// everything acknowledged before; a fenced old leader steps down.
func TestClusterThreeReplicas(t *testing.T) {
	etcd := etcdtest.Start(t, etcdtest.Options{})
	var rs []*replica
	for i := range 3 {
		rs = append(rs, startReplica(t, replicaConfig(t, etcd.Endpoints(), fmt.Sprintf("r%d", i), "/t1/")))
	}
	leader, term := waitLeader(t, rs)
	var followers []*replica
	for _, r := range rs {
		if r != leader {
			followers = append(followers, r)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	// A broadcast submitted to a follower is forwarded to the leader and
	// completes there; any replica reads it back.
	fc := clientOf(t, followers[0])
	res, err := fc.SubmitBroadcast(ctx, &client.BroadcastRequest{Type: "noop", PayloadText: "one", IdempotencyKey: "k1"})
	if err != nil || res.State != "TOMBSTONE" {
		t.Fatalf("submit through follower: %+v %v", res, err)
	}
	task, err := clientOf(t, followers[1]).GetBroadcast(ctx, res.ID)
	if err != nil || task.State != "TOMBSTONE" {
		t.Fatalf("read through the other follower: %+v %v", task, err)
	}

	// GET /v1/cluster from any replica: three members, one leader.
	st, err := fc.Cluster(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.Self != followers[0].Name() || st.Leader == nil || st.Leader.Name != leader.Name() || st.Leader.Term != term {
		t.Fatalf("cluster: self %s leader %+v, want %s led by %s term %d", st.Self, st.Leader, followers[0].Name(), leader.Name(), term)
	}
	waitFor(t, "three ready members", func() bool {
		st, err := fc.Cluster(ctx)
		if err != nil || len(st.Members) != 3 {
			return false
		}
		leaders := 0
		for _, m := range st.Members {
			if !m.Ready {
				return false
			}
			if m.Leader {
				leaders++
			}
		}
		return leaders == 1 && len(st.Problems) == 0
	})

	// Forward once: a request that arrives already forwarded at a
	// follower is refused, not forwarded again.
	req, _ := http.NewRequestWithContext(ctx, "GET", followers[1].URL()+"/v1/broadcasts/"+fmt.Sprint(res.ID), nil)
	req.Header.Set(HopHeader, "someone")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 503 || resp.Header.Get("Retry-After") == "" || !strings.Contains(string(body), "not_leader") {
		t.Fatalf("forwarded request at a follower: %d %s %v", resp.StatusCode, body, resp.Header)
	}

	// The leader stops (SIGTERM): it resigns first, a follower takes over
	// with a higher term, and the broadcast is still there; the same
	// idempotency key returns the original.
	leader.stop()
	next, term2 := waitLeader(t, followers)
	if term2 <= term {
		t.Fatalf("new term %d not above %d", term2, term)
	}
	nc := clientOf(t, next)
	dup, err := nc.SubmitBroadcast(ctx, &client.BroadcastRequest{Type: "noop", PayloadText: "one", IdempotencyKey: "k1"})
	if err != nil || !dup.Duplicate || dup.ID != res.ID {
		t.Fatalf("retry after failover: %+v %v (want duplicate of %d)", dup, err, res.ID)
	}
	res2, err := clientOf(t, followers[0]).SubmitBroadcast(ctx, &client.BroadcastRequest{Type: "noop"})
	if err != nil || res2.ID <= res.ID {
		t.Fatalf("submit after failover: %+v %v (ids must keep growing past %d)", res2, err, res.ID)
	}

	// Fence: the leader's session ends behind its back (as when it is
	// paused past its TTL). Its term store is fenced from then on, and it
	// steps down; another replica leads.
	next.mu.Lock()
	store := next.term.host.Catalog()
	next.mu.Unlock()
	cli := etcd.Client(t)
	leases, err := cli.Leases(ctx)
	if err != nil {
		t.Fatal(err)
	}
	revoked := 0
	for _, l := range leases.Leases {
		ttl, err := cli.TimeToLive(ctx, l.ID, clientv3.WithAttachedKeys())
		if err != nil {
			t.Fatal(err)
		}
		for _, k := range ttl.Keys {
			if strings.HasPrefix(string(k), "/t1.cluster/members/"+next.Name()) {
				if _, err := cli.Revoke(ctx, l.ID); err != nil {
					t.Fatal(err)
				}
				revoked++
			}
		}
	}
	if revoked != 1 {
		t.Fatalf("revoked %d sessions of %s, want 1", revoked, next.Name())
	}
	_, err = store.Commit(ctx, &catalog.Batch{Ops: []catalog.Op{{Key: []byte("pkv/x/after-fence"), Value: []byte("v")}}})
	if !errors.Is(err, catalog.ErrFenced) {
		t.Fatalf("commit of a term whose session is gone: %v, want ErrFenced", err)
	}
	third, term3 := waitLeader(t, followers)
	if term3 <= term2 {
		t.Fatalf("term after fence %d not above %d", term3, term2)
	}
	if _, err := clientOf(t, third).SubmitBroadcast(ctx, &client.BroadcastRequest{Type: "noop"}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(next.logs.String(), "stepping down") {
		t.Fatalf("the fenced leader did not log its step-down:\n%s", next.logs.String())
	}
}

// While no leader can be reached a request waits up to its timeout and
// then answers 503 with Retry-After; a leader whose address refuses
// connections makes a follower answer 503 leader_unreachable at once.
func TestNoLeaderAnswers503(t *testing.T) {
	etcd := etcdtest.Start(t, etcdtest.Options{})
	cli := etcd.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// A foreign leader that holds the election and never serves.
	sess, err := concurrency.NewSession(cli, concurrency.WithTTL(30))
	if err != nil {
		t.Fatal(err)
	}
	defer sess.Close()
	el := concurrency.NewElection(sess, "/t2.cluster/election/")
	ghost, _ := json.Marshal(leaderInfo{Name: "ghost", Address: "http://127.0.0.1:1"})
	if err := el.Campaign(ctx, string(ghost)); err != nil {
		t.Fatal(err)
	}
	cfg := replicaConfig(t, etcd.Endpoints(), "f0", "/t2/")
	cfg.API.RequestTimeout = time.Second
	r := startReplica(t, cfg)
	waitFor(t, "ghost leader observed", func() bool {
		r.mu.Lock()
		defer r.mu.Unlock()
		return r.leader != nil && r.leader.Name == "ghost"
	})
	c, _ := client.New(r.URL(), client.WithRetries(1))
	_, err = c.GetBroadcast(ctx, 1)
	var ae *client.Error
	if !errors.As(err, &ae) || ae.Status != 503 || ae.Details["reason"] != "leader_unreachable" {
		t.Fatalf("unreachable leader: %v", err)
	}
	// A leader record that cannot be read counts as no leader: wait, then 503.
	if err := el.Proclaim(ctx, "not json"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "leader unknown", func() bool {
		r.mu.Lock()
		defer r.mu.Unlock()
		return r.leader == nil
	})
	start := time.Now()
	_, err = c.GetBroadcast(ctx, 1)
	if !errors.As(err, &ae) || ae.Status != 503 || ae.Details["reason"] != "no_leader" {
		t.Fatalf("no leader: %v", err)
	}
	if d := time.Since(start); d < 900*time.Millisecond {
		t.Fatalf("answered after %s, want a wait of the request timeout (1s)", d)
	}
	resp, err := http.Get(r.URL() + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 503 {
		t.Fatalf("readyz without a leader: %d", resp.StatusCode)
	}
	// The ghost resigns: this replica campaigns, wins and serves.
	if err := el.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	waitLeader(t, []*replica{r})
	if _, err := c.SubmitBroadcast(ctx, &client.BroadcastRequest{Type: "noop"}); err != nil {
		t.Fatal(err)
	}
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		if cond() {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("timed out waiting for %s", what)
}

// hostd migrate: an embedded hostd's state moves into etcd, and a replica
// started on it honours what the embedded one acknowledged (the same
// idempotency key returns the original broadcast; ids keep growing).
func TestMigrateEmbeddedIntoEtcd(t *testing.T) {
	etcd := etcdtest.Start(t, etcdtest.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	emb := config.Default()
	emb.API.Listen = "127.0.0.1:0"
	emb.Data.Dir = t.TempDir()
	h, err := host.Open(ctx, &emb, host.Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	if err := h.Start(ctx); err != nil {
		t.Fatal(err)
	}
	c, _ := client.New(h.URL())
	orig, err := c.SubmitBroadcast(ctx, &client.BroadcastRequest{Type: "noop", PayloadText: "before", IdempotencyKey: "mig-1"})
	if err != nil {
		t.Fatal(err)
	}
	if err := h.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}

	cfg := replicaConfig(t, etcd.Endpoints(), "m0", "/mig/")
	res, err := Migrate(ctx, cfg, emb.Data.Dir, nil)
	if err != nil || res.Version == 0 {
		t.Fatalf("migrate: %+v %v", res, err)
	}
	if _, err := Migrate(ctx, cfg, emb.Data.Dir, nil); err == nil || !strings.Contains(err.Error(), "empty prefix") {
		t.Fatalf("second migrate into a used prefix: %v", err)
	}
	r := startReplica(t, cfg)
	waitLeader(t, []*replica{r})
	rc := clientOf(t, r)
	dup, err := rc.SubmitBroadcast(ctx, &client.BroadcastRequest{Type: "noop", PayloadText: "before", IdempotencyKey: "mig-1"})
	if err != nil || !dup.Duplicate || dup.ID != orig.ID {
		t.Fatalf("retry of a pre-migration key: %+v %v (want duplicate of %d)", dup, err, orig.ID)
	}
	next, err := rc.SubmitBroadcast(ctx, &client.BroadcastRequest{Type: "noop"})
	if err != nil || next.ID <= orig.ID {
		t.Fatalf("after migration: %+v %v (ids must grow past %d)", next, err, orig.ID)
	}
}

// Sizes on etcd (hard part 7): a broadcast at broadcast.max_payload to
// every configured vchannel fits etcd's default request limit (1.5 MiB)
// and completes; one above max_payload is refused before anything is
// acknowledged.
func TestMaxPayloadBroadcastOnEtcd(t *testing.T) {
	etcd := etcdtest.Start(t, etcdtest.Options{})
	cfg := replicaConfig(t, etcd.Endpoints(), "s0", "/size/")
	cfg.Broadcast.Vchannels = []string{"orders/0", "orders/1", "orders/2"}
	r := startReplica(t, cfg)
	waitLeader(t, []*replica{r})
	c := clientOf(t, r)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	payload := strings.Repeat("x", int(cfg.Broadcast.MaxPayload))
	res, err := c.SubmitBroadcast(ctx, &client.BroadcastRequest{Type: "noop", PayloadText: payload,
		VChannels: cfg.Broadcast.Vchannels, IdempotencyKey: strings.Repeat("k", cfg.Broadcast.MaxKeyLength)})
	if err != nil || res.State != "TOMBSTONE" {
		t.Fatalf("max_payload broadcast to %d vchannels: %+v %v", len(cfg.Broadcast.Vchannels), res, err)
	}
	_, err = c.SubmitBroadcast(ctx, &client.BroadcastRequest{Type: "noop", PayloadText: payload + "x", VChannels: cfg.Broadcast.Vchannels})
	if !client.HasCode(err, "too_large") {
		t.Fatalf("above max_payload: %v", err)
	}
}

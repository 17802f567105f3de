package clusterbench

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/hostd-dev/hostd/bench/baseline"
	"github.com/hostd-dev/hostd/bench/report"
	"github.com/hostd-dev/hostd/client"
	"github.com/hostd-dev/hostd/host/cluster"
	"github.com/hostd-dev/hostd/host/config"
	"github.com/hostd-dev/hostd/internal/etcdtest"
)

func seconds() time.Duration {
	if v, err := strconv.ParseFloat(os.Getenv("HOSTD_BENCH_SECONDS"), 64); err == nil && v > 0 {
		return time.Duration(v * float64(time.Second))
	}
	return 2 * time.Second
}

const (
	prefix      = "/bench/"
	electionTTL = 2 * time.Second
)

var payload = string(make([]byte, 64))

func replica(t *testing.T, endpoints []string, name string, adjust ...func(*config.Config)) *cluster.Node {
	t.Helper()
	cfg := config.Default()
	cfg.API.Listen = "127.0.0.1:0"
	cfg.API.ShutdownTimeout = 5 * time.Second
	cfg.API.RequestTimeout = 10 * time.Second
	cfg.Data.Dir = t.TempDir()
	cfg.Catalog.Backend = config.CatalogEtcd
	cfg.Catalog.Etcd.Endpoints = endpoints
	cfg.Catalog.Etcd.Prefix = prefix
	cfg.Cluster.NodeName = name
	cfg.Cluster.ElectionTTL = electionTTL
	cfg.Broadcast.Vchannels = []string{"orders/0", "orders/1"}
	for _, a := range adjust {
		a(&cfg)
	}
	logger := slog.New(slog.DiscardHandler)
	if path := os.Getenv("HOSTD_BENCH_LOG"); path != "" { // the replicas' logs, for a profile of a miss
		f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { f.Close() })
		logger = slog.New(slog.NewTextHandler(f, nil)).With("node", name)
	}
	n, err := cluster.Open(context.Background(), &cfg, cluster.Options{Logger: logger, LogOutput: io.Discard})
	if err != nil {
		t.Fatal(err)
	}
	if err := n.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	return n
}

// leader waits until some node (not in skip) names a ready leader among
// nodes and returns it.
func leader(t *testing.T, nodes []*cluster.Node, skip *cluster.Node) *cluster.Node {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		for _, n := range nodes {
			if n == skip {
				continue
			}
			c, _ := client.New(n.URL(), client.WithRetries(1))
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			st, err := c.Cluster(ctx)
			cancel()
			if err != nil || st.Leader == nil {
				continue
			}
			for _, m := range st.Members {
				if m.Name == st.Leader.Name && m.Ready {
					for _, l := range nodes {
						if l.Name() == m.Name && l != skip {
							return l
						}
					}
				}
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatal("no ready leader in 60s")
	return nil
}

func submit(c *client.Client) error {
	res, err := c.SubmitBroadcast(context.Background(), &client.BroadcastRequest{Type: "noop", PayloadText: payload,
		VChannels: []string{"orders/0", "orders/1"}, Timeout: "10s"})
	if err != nil {
		return err
	}
	if res.State != "TOMBSTONE" {
		return fmt.Errorf("broadcast %d: %s", res.ID, res.State)
	}
	return nil
}

// writes counts the catalog's key writes (and their bytes) in etcd from a
// revision on.
type writes struct {
	keys, bytes atomic.Int64
	cancel      func()
	done        chan struct{}
}

func watchWrites(cli *clientv3.Client, from int64) *writes {
	ctx, cancel := context.WithCancel(context.Background())
	w := &writes{cancel: cancel, done: make(chan struct{})}
	wch := cli.Watch(ctx, prefix, clientv3.WithPrefix(), clientv3.WithRev(from))
	go func() {
		defer close(w.done)
		for wr := range wch {
			for _, ev := range wr.Events {
				if ev.Type == clientv3.EventTypePut {
					w.keys.Add(1)
					w.bytes.Add(int64(len(ev.Kv.Key) + len(ev.Kv.Value)))
				}
			}
		}
	}()
	return w
}

func revision(t *testing.T, cli *clientv3.Client) int64 {
	t.Helper()
	resp, err := cli.Get(context.Background(), "rev-probe")
	if err != nil {
		t.Fatal(err)
	}
	return resp.Header.Revision
}

func TestReport(t *testing.T) {
	if os.Getenv("HOSTD_BENCH") != "1" {
		t.Skip("set HOSTD_BENCH=1 to measure")
	}
	d := seconds()
	etcd := etcdtest.Start(t, etcdtest.Options{Members: 3})
	cli := etcd.Client(t)
	var nodes []*cluster.Node
	for i := range 3 {
		nodes = append(nodes, replica(t, etcd.Endpoints(), fmt.Sprintf("r%d", i)))
	}
	var stopOnce sync.Map
	stop := func(n *cluster.Node) {
		if _, done := stopOnce.LoadOrStore(n, true); done {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = n.Shutdown(ctx)
	}
	t.Cleanup(func() {
		for _, n := range nodes {
			stop(n)
		}
	})
	lead := leader(t, nodes, nil)
	c, err := client.New(lead.URL(), client.WithRetries(1))
	if err != nil {
		t.Fatal(err)
	}
	for range 20 { // warm up: sequence blocks, connections
		if err := submit(c); err != nil {
			t.Fatal(err)
		}
	}
	// The term fence every raw txn compares, like a leader's commits.
	sess, err := cli.Grant(context.Background(), 60)
	if err != nil {
		t.Fatal(err)
	}
	fk := "/rawbench/fence"
	pr, err := cli.Put(context.Background(), fk, "term", clientv3.WithLease(sess.ID))
	if err != nil {
		t.Fatal(err)
	}
	term := pr.Header.Revision

	var rows []report.Row
	for _, workers := range []int{1, 16, 64} {
		rev0 := revision(t, cli)
		w := watchWrites(cli, rev0+1)
		hostd, err := baseline.Run("hostd broadcast", workers, d, func(int) error { return submit(c) })
		if err != nil {
			t.Fatal(err)
		}
		rev1 := revision(t, cli)
		// Let the watch catch up to rev1, then stop it.
		time.Sleep(500 * time.Millisecond)
		w.cancel()
		<-w.done
		ops := float64(hostd.Ops)
		txnsPer := float64(rev1-rev0-1) / ops // one revision per write txn (rev1's probe read adds none)
		keysPer := float64(w.keys.Load()) / ops
		bytesPerKey := 0
		if k := w.keys.Load(); k > 0 {
			bytesPerKey = int(w.bytes.Load() / k)
		}
		nkeys := max(1, int(keysPer+0.5))
		val := string(make([]byte, max(1, bytesPerKey-24)))
		var seq atomic.Int64
		raw, err := baseline.Run("raw etcd txn", workers, d, func(int) error {
			n := seq.Add(1)
			ops := make([]clientv3.Op, nkeys)
			for i := range ops {
				ops[i] = clientv3.OpPut(fmt.Sprintf("/rawbench/k/%012d/%03d", n, i), val)
			}
			resp, err := cli.Txn(context.Background()).If(clientv3.Compare(clientv3.CreateRevision(fk), "=", term)).Then(ops...).Commit()
			if err != nil {
				return err
			}
			if !resp.Succeeded {
				return fmt.Errorf("fence compare failed")
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%v\n%v", hostd, raw)
		rows = append(rows, report.Row{
			Bench: "cluster", Figure: fmt.Sprintf("broadcast through the leader (noop, 2 vchannels), %d client(s)", workers),
			Value: hostd.Rate(), Unit: "broadcasts/s",
			Baseline: fmt.Sprintf("raw etcd txn (fence compare + %d puts of %d B), same concurrency", nkeys, bytesPerKey), BaseVal: raw.Rate(), BaseUnit: "txns/s",
			Note: fmt.Sprintf("one broadcast = %.1f etcd write txns, %.1f keys written; p50 %s p99 %s (raw p50 %s p99 %s); hostd cpu/op %s incl. etcd in process",
				txnsPer, keysPer, hostd.P50.Round(time.Microsecond), hostd.P99.Round(time.Microsecond),
				raw.P50.Round(time.Microsecond), raw.P99.Round(time.Microsecond), hostd.CPUPerOp().Round(time.Microsecond)),
		})
	}

	// Lease pairs: acquire + release through the leader, vs two raw etcd
	// txns (a put under a compare that the key is absent, then a delete),
	// each with the fence compare.
	var lseq atomic.Int64
	for _, workers := range []int{1, 16, 64} {
		hostd, err := baseline.Run("hostd lease acquire+release", workers, d, func(int) error {
			g, err := c.AcquireLock(context.Background(), client.AcquireLock{Owner: "bench", TTL: "30s",
				Keys: []client.LockKey{{Domain: "bench", Key: fmt.Sprintf("k%d", lseq.Add(1))}}})
			if err != nil {
				return err
			}
			return c.ReleaseLock(context.Background(), g.ID, g.Token)
		})
		if err != nil {
			t.Fatal(err)
		}
		raw, err := baseline.Run("raw etcd txn pair", workers, d, func(int) error {
			k := fmt.Sprintf("/rawbench/lease/%012d", lseq.Add(1))
			fence := clientv3.Compare(clientv3.CreateRevision(fk), "=", term)
			resp, err := cli.Txn(context.Background()).If(fence, clientv3.Compare(clientv3.CreateRevision(k), "=", 0)).
				Then(clientv3.OpPut(k, string(make([]byte, 200)))).Commit()
			if err != nil {
				return err
			}
			if !resp.Succeeded {
				return fmt.Errorf("raw acquire compare failed")
			}
			_, err = cli.Txn(context.Background()).If(fence).Then(clientv3.OpDelete(k)).Commit()
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%v\n%v", hostd, raw)
		rows = append(rows, report.Row{
			Bench: "cluster", Figure: fmt.Sprintf("lease acquire+release through the leader, %d client(s)", workers),
			Value: hostd.Rate(), Unit: "pairs/s",
			Baseline: "raw etcd txn pair (compare-and-put 200 B, delete; fence compare each), same concurrency", BaseVal: raw.Rate(), BaseUnit: "pairs/s",
			Note: fmt.Sprintf("p50 %s p99 %s (raw p50 %s p99 %s)", hostd.P50.Round(time.Microsecond), hostd.P99.Round(time.Microsecond),
				raw.P50.Round(time.Microsecond), raw.P99.Round(time.Microsecond)),
		})
	}

	// Clean handover: the leader stops (resigns); the first broadcast
	// acknowledged through a survivor.
	var survivor *cluster.Node
	for _, n := range nodes {
		if n != lead {
			survivor = n
			break
		}
	}
	sc, _ := client.New(survivor.URL(), client.WithRetries(1))
	t0 := time.Now()
	go stop(lead)
	for {
		if err := submit(sc); err == nil {
			break
		}
		if time.Since(t0) > 60*time.Second {
			t.Fatal("no broadcast through a survivor within 60s of the leader's stop")
		}
		time.Sleep(10 * time.Millisecond)
	}
	handover := time.Since(t0)
	rows = append(rows, report.Row{
		Bench: "cluster", Figure: "handover on a clean leader stop (resign) → first broadcast through a survivor",
		Value: float64(handover.Microseconds()) / 1000, Unit: "ms",
		Baseline: "cluster.election_ttl", BaseVal: float64(electionTTL.Milliseconds()),
		Note: "a crashed leader waits for the TTL instead: see e2e TestClusterLeaderKills",
	})
	if err := report.Emit(t.Logf, rows...); err != nil {
		t.Fatal(err)
	}
}

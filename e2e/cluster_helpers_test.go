package e2e

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/hostd-dev/hostd/client"
	"github.com/hostd-dev/hostd/internal/etcdtest"
	"github.com/hostd-dev/hostd/internal/natstest"
	"github.com/hostd-dev/hostd/internal/testport"
)

// The cluster harness: a 3-member etcd inside the test process
// (internal/etcdtest) and hostd replicas as subprocesses of the e2e binary
// (built without -race even when the test runs with it), each with its own
// data dir, port and log. Helpers find the leader through GET /v1/cluster,
// kill -9, restart, SIGSTOP and SIGCONT a replica, and build a client whose
// every request goes to a random replica.

// clusterVChannels are the replicas' broadcast.vchannels.
var clusterVChannels = []string{"orders/0", "orders/1"}

// clusterElectionTTL is every replica's cluster.election_ttl.
const clusterElectionTTL = 2 * time.Second

type ecluster struct {
	t        *testing.T
	etcd     *etcdtest.Cluster
	nats     *natstest.Procs // nil: the physical queues live in etcd
	replicas []*ereplica
}

// ereplica is one hostd replica; d is its current process (a restart
// replaces it).
type ereplica struct {
	name    string
	addr    string // host:port
	cfg     string
	logPath string
	c       *client.Client // this replica only, no retries
	mu      sync.Mutex
	d       *daemon
}

func (r *ereplica) daemon() *daemon {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.d
}

// startCluster starts etcd and n replicas and waits until every replica is
// ready and they agree on a leader.
func startCluster(t *testing.T, n int, extraConfig string) *ecluster {
	t.Helper()
	etcd := etcdtest.Start(t, etcdtest.Options{Members: 3, HeartbeatMS: 100, ElectionMS: 1000})
	ec := &ecluster{t: t, etcd: etcd}
	for i := range n {
		dir := t.TempDir()
		r := &ereplica{name: fmt.Sprintf("r%d", i), addr: testport.Addr(t), logPath: filepath.Join(dir, "hostd.log")}
		r.cfg = filepath.Join(dir, "hostd.yaml")
		y := fmt.Sprintf(`api:
  listen: %s
  request_timeout: 5s
  shutdown_timeout: 5s
data:
  dir: %s
catalog:
  backend: etcd
  etcd:
    endpoints: [%s]
    prefix: /e2e/
cluster:
  node_name: %s
  election_ttl: %s
broadcast:
  vchannels: [%s]
%s`, r.addr, filepath.Join(dir, "data"), strings.Join(etcd.Endpoints(), ", "), r.name, clusterElectionTTL,
			strings.Join(clusterVChannels, ", "), extraConfig)
		if err := os.WriteFile(r.cfg, []byte(y), 0o644); err != nil {
			t.Fatal(err)
		}
		c, err := client.New("http://"+r.addr, client.WithRetries(1))
		if err != nil {
			t.Fatal(err)
		}
		r.c = c
		ec.replicas = append(ec.replicas, r)
	}
	// On failure, each replica's log is kept (the temp dirs go): in
	// $HOSTD_E2E_KEEP_LOGS if set, else its tail is in the test log.
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		for _, r := range ec.replicas {
			if dir := os.Getenv("HOSTD_E2E_KEEP_LOGS"); dir != "" {
				b, _ := os.ReadFile(r.logPath)
				p := filepath.Join(dir, fmt.Sprintf("%s-%s.log", strings.ReplaceAll(t.Name(), "/", "_"), r.name))
				if err := os.WriteFile(p, b, 0o644); err == nil {
					t.Logf("%s's log: %s", r.name, p)
					continue
				}
			}
			t.Logf("%s's log ends:\n%s", r.name, tail(r.logPath))
		}
	})
	for _, r := range ec.replicas {
		ec.start(r)
	}
	for _, r := range ec.replicas {
		ec.waitReady(r)
	}
	ec.leader(60 * time.Second)
	return ec
}

// start runs r's process (again).
func (ec *ecluster) start(r *ereplica) {
	ec.t.Helper()
	d := start(ec.t, r.cfg, r.addr, r.logPath)
	r.mu.Lock()
	r.d = d
	r.mu.Unlock()
}

// waitReady waits for r's /readyz (it knows a leader).
func (ec *ecluster) waitReady(r *ereplica) {
	ec.t.Helper()
	if !r.daemon().waitReady(ec.t, r.c) {
		ec.t.Fatalf("%s exited before it was ready; log:\n%s", r.name, tail(r.logPath))
	}
}

// alive reports whether r's process runs (stopped counts as running).
func (r *ereplica) alive() bool {
	select {
	case <-r.daemon().done:
		return false
	default:
		return true
	}
}

// kill9 kills r with SIGKILL and waits for it to exit.
func (r *ereplica) kill9() { r.daemon().kill() }

// signal sends sig (SIGSTOP, SIGCONT) to r.
func (r *ereplica) signal(t *testing.T, sig syscall.Signal) {
	t.Helper()
	if err := r.daemon().cmd.Process.Signal(sig); err != nil {
		t.Fatalf("signal %v to %s: %v", sig, r.name, err)
	}
}

// leader asks the running replicas for the leader until one names a
// leader that is one of them and reports itself ready (its term's
// recovery finished) within d; it returns that replica and the term.
func (ec *ecluster) leader(d time.Duration, skip ...*ereplica) (*ereplica, int64) {
	ec.t.Helper()
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		for _, r := range ec.replicas {
			if !r.alive() || contains(skip, r) {
				continue
			}
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			st, err := r.c.Cluster(ctx)
			cancel()
			if err != nil || st.Leader == nil {
				continue
			}
			for _, m := range st.Members {
				if m.Name == st.Leader.Name && m.Ready {
					if l := ec.byName(m.Name); l != nil && l.alive() && !contains(skip, l) {
						return l, st.Leader.Term
					}
				}
			}
		}
		time.Sleep(25 * time.Millisecond)
	}
	ec.t.Fatalf("no ready leader within %v", d)
	return nil, 0
}

func contains(rs []*ereplica, r *ereplica) bool {
	for _, x := range rs {
		if x == r {
			return true
		}
	}
	return false
}

func (ec *ecluster) byName(name string) *ereplica {
	for _, r := range ec.replicas {
		if r.name == name {
			return r
		}
	}
	return nil
}

// randomClient is a client whose every request (and every retry of one)
// goes to a random replica, as behind a load balancer.
func (ec *ecluster) randomClient(opts ...client.Option) *client.Client {
	ec.t.Helper()
	var addrs []string
	for _, r := range ec.replicas {
		addrs = append(addrs, r.addr)
	}
	tr := &randomReplicas{addrs: addrs, rt: &http.Transport{
		MaxIdleConnsPerHost: 32,
		DialContext:         (&net.Dialer{Timeout: time.Second}).DialContext,
	}}
	c, err := client.New("http://"+addrs[0], append([]client.Option{client.WithHTTPClient(&http.Client{Transport: tr})}, opts...)...)
	if err != nil {
		ec.t.Fatal(err)
	}
	return c
}

type randomReplicas struct {
	addrs []string
	rt    http.RoundTripper
}

func (rr *randomReplicas) RoundTrip(req *http.Request) (*http.Response, error) {
	out := req.Clone(req.Context())
	out.URL.Host = rr.addrs[rand.IntN(len(rr.addrs))]
	out.Host = out.URL.Host
	return rr.rt.RoundTrip(out)
}

// retryable: the outcome of a request that failed this way is unknown or
// nothing happened (no leader, leader unreachable, fenced, timeout, the
// replica unreachable); the client tries again with the same key.
func retryable(err error) bool {
	var ce *client.Error
	if errors.As(err, &ce) {
		return ce.Status == 503 || ce.Status == 504 || ce.Code == "timeout" || ce.Code == "canceled"
	}
	return true // transport errors, deadlines
}

// metric reads one counter or gauge (summed over label sets) from r's
// /metrics; -1 when absent.
func metricValue(t *testing.T, r *ereplica, name string) float64 {
	t.Helper()
	resp, err := http.Get("http://" + r.addr + "/metrics")
	if err != nil {
		t.Fatalf("metrics of %s: %v", r.name, err)
	}
	defer resp.Body.Close()
	sum, found := 0.0, false
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, name) {
			continue
		}
		rest := line[len(name):]
		if rest == "" || (rest[0] != ' ' && rest[0] != '{') {
			continue
		}
		f := strings.Fields(line)
		v, err := strconv.ParseFloat(f[len(f)-1], 64)
		if err == nil {
			sum += v
			found = true
		}
	}
	if !found {
		return -1
	}
	return sum
}

// percentile of sorted durations (nearest rank).
func percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(p*float64(len(sorted))+0.999999) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

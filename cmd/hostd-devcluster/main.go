// Command hostd-devcluster starts a local cluster-mode hostd on loopback,
// for development and demos: a 3-member etcd cluster (the real etcd
// server, go.etcd.io/etcd/server/v3 at the version in go.mod), 3 NATS
// servers forming a JetStream cluster for the physical queues (the real
// nats-server, github.com/nats-io/nats-server/v2 at the version in go.mod),
// both running in this process, and 3 hostd replicas as subprocesses of a
// hostd binary. It prints where to point the CLI, and on Ctrl-C (SIGINT or
// SIGTERM) stops the replicas (each resigns and drains), then NATS and
// etcd.
//
//	make devcluster                       # builds bin/hostd, runs this
//	go run ./cmd/hostd-devcluster -hostd bin/hostd -dir ./devcluster
//
// State lives under -dir (etcd members' data, each replica's config,
// data dir and log); a second start on the same -dir continues the same
// cluster. Delete the dir for a fresh one. Ports: replicas on
// -port, -port+1, ...; etcd clients on -etcd-port, -etcd-port+1, ...,
// peers on -etcd-port+100, ...; NATS clients on -nats-port, ..., routes
// on -nats-port+100, .... -nats-servers 0 keeps the queues in etcd.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"go.etcd.io/etcd/server/v3/embed"
)

type options struct {
	dir      string
	hostd    string
	replicas int
	members  int
	port     int
	etcdPort int
	// NATS JetStream for the physical queues (wal.backend jetstream);
	// natsServers 0 keeps them in the etcd catalog.
	natsServers int
	natsPort    int
	ttl         time.Duration
	readyFile   string
}

func main() {
	var o options
	flag.StringVar(&o.dir, "dir", "./devcluster", "state directory (etcd data, replica configs, data dirs and logs)")
	flag.StringVar(&o.hostd, "hostd", "bin/hostd", "hostd binary to run the replicas with (make build)")
	flag.IntVar(&o.replicas, "replicas", 3, "hostd replicas")
	flag.IntVar(&o.members, "etcd-members", 3, "etcd members")
	flag.IntVar(&o.port, "port", 7071, "API port of the first replica (the others follow)")
	flag.IntVar(&o.etcdPort, "etcd-port", 23790, "client port of the first etcd member (peers at +100)")
	flag.IntVar(&o.natsServers, "nats-servers", 3, "NATS servers with JetStream for the physical queues (0: queues in the etcd catalog)")
	flag.IntVar(&o.natsPort, "nats-port", 24220, "client port of the first NATS server (routes at +100)")
	flag.DurationVar(&o.ttl, "election-ttl", 5*time.Second, "cluster.election_ttl of the replicas")
	flag.StringVar(&o.readyFile, "ready-file", "", "write the first replica's URL to this file once every replica is ready (scripts, tests)")
	flag.Parse()
	if err := run(o); err != nil {
		fmt.Fprintln(os.Stderr, "hostd-devcluster:", err)
		os.Exit(1)
	}
}

func run(o options) error {
	if o.replicas < 1 || o.members < 1 {
		return errors.New("-replicas and -etcd-members must be at least 1")
	}
	if _, err := os.Stat(o.hostd); err != nil {
		return fmt.Errorf("hostd binary %s: %w (build it with `make build`, or pass -hostd)", o.hostd, err)
	}
	hostd, err := filepath.Abs(o.hostd)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(o.dir, 0o755); err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()

	etcds, endpoints, err := startEtcd(o)
	defer func() {
		for _, e := range etcds {
			e.Close()
		}
	}()
	if err != nil {
		return err
	}
	fmt.Printf("etcd %d member(s) up: %s\n", len(etcds), strings.Join(endpoints, ","))
	natsURL := ""
	if o.natsServers > 0 {
		var nats []*server.Server
		nats, natsURL, err = startNATS(o)
		defer stopNATS(nats) // after the replicas (deferred later, run first)
		if err != nil {
			return err
		}
		fmt.Printf("nats %d server(s) with JetStream up: %s\n", len(nats), natsURL)
	}

	var procs []*exec.Cmd
	var urls []string
	for i := range o.replicas {
		cmd, u, err := startReplica(o, hostd, i, endpoints, natsURL)
		if err != nil {
			stopReplicas(procs)
			return err
		}
		procs = append(procs, cmd)
		urls = append(urls, u)
	}
	exited := make(chan error, len(procs))
	for i, p := range procs {
		go func() { exited <- fmt.Errorf("replica r%d exited: %v (see %s)", i, p.Wait(), logPath(o, i)) }()
	}
	if err := waitReady(ctx, urls, exited); err != nil {
		stopReplicas(procs)
		return err
	}
	fmt.Printf(`
hostd cluster up: %d replicas, any of them serves the API
  %s

  export HOSTD_ADDR=%s
  hostd cluster status
  hostd broadcast send noop orders/0 orders/1 --payload hello

logs: %s/r*/hostd.log — Ctrl-C stops everything (state stays in %s)
`, len(urls), strings.Join(urls, "\n  "), urls[0], o.dir, o.dir)
	if o.readyFile != "" {
		if err := os.WriteFile(o.readyFile, []byte(urls[0]+"\n"), 0o644); err != nil {
			stopReplicas(procs)
			return err
		}
	}
	var runErr error
	select {
	case <-ctx.Done():
		fmt.Println("stopping the replicas, then NATS and etcd")
	case runErr = <-exited:
	}
	stopReplicas(procs)
	return runErr
}

func startEtcd(o options) ([]*embed.Etcd, []string, error) {
	var initial, endpoints []string
	for i := range o.members {
		initial = append(initial, fmt.Sprintf("e%d=http://127.0.0.1:%d", i, o.etcdPort+100+i))
		endpoints = append(endpoints, fmt.Sprintf("http://127.0.0.1:%d", o.etcdPort+i))
	}
	var (
		mu   sync.Mutex
		out  []*embed.Etcd
		errs []error
		wg   sync.WaitGroup
	)
	for i := range o.members {
		wg.Add(1)
		go func() {
			defer wg.Done()
			e, err := startMember(o, i, strings.Join(initial, ","))
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, err)
				return
			}
			out = append(out, e)
		}()
	}
	wg.Wait()
	return out, endpoints, errors.Join(errs...)
}

func startMember(o options, i int, initial string) (*embed.Etcd, error) {
	cfg := embed.NewConfig()
	cfg.Name = fmt.Sprintf("e%d", i)
	cfg.Dir = filepath.Join(o.dir, "etcd", cfg.Name)
	state := "new"
	if _, err := os.Stat(filepath.Join(cfg.Dir, "member")); err == nil {
		state = "existing"
	}
	cu, _ := url.Parse(fmt.Sprintf("http://127.0.0.1:%d", o.etcdPort+i))
	pu, _ := url.Parse(fmt.Sprintf("http://127.0.0.1:%d", o.etcdPort+100+i))
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{*cu}, []url.URL{*cu}
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{*pu}, []url.URL{*pu}
	cfg.InitialCluster = initial
	cfg.ClusterState = state
	cfg.InitialClusterToken = "hostd-devcluster"
	// Relaxed for a laptop or a loaded CI box; docs/cluster.md has the
	// production values.
	cfg.TickMs, cfg.ElectionMs = 250, 2500
	cfg.AutoCompactionMode, cfg.AutoCompactionRetention = "periodic", "1h"
	cfg.LogLevel = "error"
	cfg.LogOutputs = []string{filepath.Join(o.dir, "etcd", cfg.Name+".log")}
	if err := os.MkdirAll(filepath.Dir(cfg.LogOutputs[0]), 0o755); err != nil {
		return nil, err
	}
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		return nil, fmt.Errorf("etcd member %s: %w", cfg.Name, err)
	}
	select {
	case <-e.Server.ReadyNotify():
		return e, nil
	case err := <-e.Err():
		e.Close()
		return nil, fmt.Errorf("etcd member %s: %w", cfg.Name, err)
	case <-time.After(60 * time.Second):
		e.Close()
		return nil, fmt.Errorf("etcd member %s not ready after 60s", cfg.Name)
	}
}

func logPath(o options, i int) string {
	return filepath.Join(o.dir, fmt.Sprintf("r%d", i), "hostd.log")
}

func startReplica(o options, hostd string, i int, endpoints []string, natsURL string) (*exec.Cmd, string, error) {
	dir := filepath.Join(o.dir, fmt.Sprintf("r%d", i))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, "", err
	}
	addr := fmt.Sprintf("127.0.0.1:%d", o.port+i)
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, "", err
	}
	cfg := fmt.Sprintf(`# written by hostd-devcluster
api:
  listen: %s
data:
  dir: %s/data
catalog:
  backend: etcd
  etcd:
    endpoints: [%s]
    prefix: /hostd/
cluster:
  node_name: r%d
  election_ttl: %s
broadcast:
  vchannels: [orders/0, orders/1]
`, addr, abs, strings.Join(endpoints, ", "), i, o.ttl)
	if natsURL != "" {
		replicas := 1
		if o.natsServers >= 3 {
			replicas = 3
		}
		cfg += fmt.Sprintf(`wal:
  backend: jetstream
  jetstream:
    url: %s
    replicas: %d
`, natsURL, replicas)
	}
	file := filepath.Join(dir, "hostd.yaml")
	if err := os.WriteFile(file, []byte(cfg), 0o644); err != nil {
		return nil, "", err
	}
	logf, err := os.OpenFile(logPath(o, i), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, "", err
	}
	cmd := exec.Command(hostd, "serve", "--config", file)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.Env = append(os.Environ(), "HOSTD_CONFIG=")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true} // Ctrl-C reaches us, not them: we stop them in order
	if err := cmd.Start(); err != nil {
		logf.Close()
		return nil, "", fmt.Errorf("start replica r%d: %w", i, err)
	}
	logf.Close()
	return cmd, "http://" + addr, nil
}

// waitReady polls every replica's /readyz until all answer 200.
func waitReady(ctx context.Context, urls []string, exited <-chan error) error {
	deadline := time.Now().Add(2 * time.Minute)
	for time.Now().Before(deadline) {
		ready := 0
		for _, u := range urls {
			resp, err := http.Get(u + "/readyz")
			if err == nil {
				resp.Body.Close()
				if resp.StatusCode == 200 {
					ready++
				}
			}
		}
		if ready == len(urls) {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case err := <-exited:
			return err
		case <-time.After(200 * time.Millisecond):
		}
	}
	return errors.New("replicas not ready after 2 minutes (see their logs)")
}

// stopReplicas sends SIGTERM to every replica (each resigns and drains)
// and waits up to 40 s before killing what is left.
func stopReplicas(procs []*exec.Cmd) {
	for _, p := range procs {
		_ = p.Process.Signal(syscall.SIGTERM)
	}
	deadline := time.Now().Add(40 * time.Second)
	for _, p := range procs {
		for time.Now().Before(deadline) {
			if p.Process.Signal(syscall.Signal(0)) != nil {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		_ = p.Process.Kill()
	}
}

// Package etcdtest starts real etcd servers inside a test process
// (go.etcd.io/etcd/server/v3/embed): one member or a small cluster, each in
// a temp dir on loopback ports, with timings relaxed for a loaded 2-core
// machine. Tests of the etcd catalog and of cluster mode use it; nothing
// outside tests imports it.
//
//	c := etcdtest.Start(t, etcdtest.Options{})
//	cli := c.Client(t)                    // closed by t.Cleanup
//	endpoints := c.Endpoints()            // for a hostd config
//
// Members stop at t.Cleanup; Stop and Restart let a test take a member
// away and bring it back (quorum tests).
package etcdtest

import (
	"errors"
	"fmt"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"

	"github.com/hostd-dev/hostd/internal/testport"
)

// Options configure Start. Zero values give one member with the defaults
// below.
type Options struct {
	// Members is the cluster size (default 1).
	Members int
	// HeartbeatMS and ElectionMS are etcd's raft timings (defaults 100 and
	// 1000: relaxed for a loaded machine).
	HeartbeatMS, ElectionMS uint
	// MaxTxnOps and MaxRequestBytes mirror etcd's --max-txn-ops and
	// --max-request-bytes (defaults: etcd's, 128 and 1.5 MiB).
	MaxTxnOps       uint
	MaxRequestBytes uint
	// Dir is the parent of the members' data dirs (default t.TempDir()).
	Dir string
}

// Cluster is a running etcd cluster of embedded members.
type Cluster struct {
	t       testing.TB
	opts    Options
	mu      sync.Mutex
	members []*member
}

type member struct {
	name       string
	dir        string
	clientURL  url.URL
	peerURL    url.URL
	etcd       *embed.Etcd
	initialCfg string
}

// Start starts opts.Members members and waits until the cluster serves.
// The test fails at once if etcd cannot start.
func Start(t testing.TB, opts Options) *Cluster {
	t.Helper()
	if opts.Members <= 0 {
		opts.Members = 1
	}
	if opts.HeartbeatMS == 0 {
		opts.HeartbeatMS = 100
	}
	if opts.ElectionMS == 0 {
		opts.ElectionMS = 1000
	}
	if opts.Dir == "" {
		opts.Dir = t.TempDir()
	}
	c := &Cluster{t: t, opts: opts}
	t.Cleanup(c.StopAll)
	// Ports are named before etcd binds them; another process can take
	// one in between. Such a start is thrown away and tried again on fresh
	// ports and fresh dirs.
	var err error
	for attempt := range 5 {
		if err = c.startNew(attempt); err == nil || !testport.IsAddrInUse(err) {
			break
		}
		c.StopAll()
	}
	if err != nil {
		t.Fatalf("etcdtest: %v", err)
	}
	return c
}

func (c *Cluster) startNew(attempt int) error {
	c.members = nil
	var initial []string
	for i := 0; i < c.opts.Members; i++ {
		m := &member{name: fmt.Sprintf("m%d", i), dir: fmt.Sprintf("%s/a%d-m%d", c.opts.Dir, attempt, i)}
		m.clientURL = url.URL{Scheme: "http", Host: testport.Addr(c.t)}
		m.peerURL = url.URL{Scheme: "http", Host: testport.Addr(c.t)}
		initial = append(initial, m.name+"="+m.peerURL.String())
		c.members = append(c.members, m)
	}
	for _, m := range c.members {
		m.initialCfg = strings.Join(initial, ",")
	}
	var wg sync.WaitGroup
	errs := make([]error, len(c.members))
	for i, m := range c.members {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = c.startMember(m, "new")
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

func (c *Cluster) startMember(m *member, state string) error {
	cfg := embed.NewConfig()
	cfg.Name = m.name
	cfg.Dir = m.dir
	cfg.ListenClientUrls = []url.URL{m.clientURL}
	cfg.AdvertiseClientUrls = []url.URL{m.clientURL}
	cfg.ListenPeerUrls = []url.URL{m.peerURL}
	cfg.AdvertisePeerUrls = []url.URL{m.peerURL}
	cfg.InitialCluster = m.initialCfg
	cfg.ClusterState = state
	cfg.InitialClusterToken = "hostd-test"
	cfg.TickMs = c.opts.HeartbeatMS
	cfg.ElectionMs = c.opts.ElectionMS
	// Shutdown logs "server closed" at error level: noise in test output.
	cfg.LogLevel = "fatal"
	cfg.Logger = "zap"
	if c.opts.MaxTxnOps > 0 {
		cfg.MaxTxnOps = c.opts.MaxTxnOps
	}
	if c.opts.MaxRequestBytes > 0 {
		cfg.MaxRequestBytes = c.opts.MaxRequestBytes
	}
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		return fmt.Errorf("start member %s: %w", m.name, err)
	}
	select {
	case <-e.Server.ReadyNotify():
	case err := <-e.Err():
		e.Close()
		return fmt.Errorf("member %s: %w", m.name, err)
	case <-time.After(60 * time.Second):
		e.Close()
		return fmt.Errorf("member %s did not become ready in 60s", m.name)
	}
	c.mu.Lock()
	m.etcd = e
	c.mu.Unlock()
	return nil
}

// Endpoints are the client URLs of every member (running or not).
func (c *Cluster) Endpoints() []string {
	out := make([]string, len(c.members))
	for i, m := range c.members {
		out[i] = m.clientURL.String()
	}
	return out
}

// Client returns a client of every member, closed at t.Cleanup.
func (c *Cluster) Client(t testing.TB) *clientv3.Client {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{Endpoints: c.Endpoints(), DialTimeout: 10 * time.Second})
	if err != nil {
		t.Fatalf("etcdtest: client: %v", err)
	}
	t.Cleanup(func() { _ = cli.Close() })
	return cli
}

// Stop stops member i (its data dir stays for Restart).
func (c *Cluster) Stop(i int) {
	c.mu.Lock()
	e := c.members[i].etcd
	c.members[i].etcd = nil
	c.mu.Unlock()
	if e != nil {
		e.Close()
	}
}

// Restart starts a stopped member i again on its data dir and ports (a
// port taken meanwhile is waited for, up to 10 s).
func (c *Cluster) Restart(i int) {
	c.t.Helper()
	var err error
	for range 20 {
		if err = c.startMember(c.members[i], "existing"); err == nil || !testport.IsAddrInUse(err) {
			break
		}
		time.Sleep(500 * time.Millisecond)
	}
	if err != nil {
		c.t.Fatalf("etcdtest: %v", err)
	}
}

// StopAll stops every running member.
func (c *Cluster) StopAll() {
	for i := range c.members {
		c.Stop(i)
	}
}

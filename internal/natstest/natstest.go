// Package natstest starts real NATS servers with JetStream inside a test
// process (github.com/nats-io/nats-server/v2/server): one server or a
// JetStream cluster on loopback, each storing in a temp dir. Tests of the
// JetStream WAL and of cluster mode use it; nothing outside tests imports
// it.
//
//	c := natstest.Start(t, natstest.Options{})          // one server
//	c := natstest.Start(t, natstest.Options{Servers: 3, Tags: [][]string{{"az:a"}, {"az:b"}, {"az:c"}}})
//	nc := c.Conn(t)                                     // closed by t.Cleanup
//
// Stop and Restart take one server away and bring it back on the same
// ports and store dir.
//
// Procs (procs.go) is the same as a 3-server cluster of nats-server
// processes, built by BuildServer from the module: servers that can be
// killed with SIGKILL, for crash and quorum-loss tests.
//
//	bin, err := natstest.BuildServer(dir)
//	c := natstest.StartProcs(t, bin) // c.Kill(i), c.Stop(i), c.Restart(i), c.URL()
package natstest

import (
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/hostd-dev/hostd/internal/testport"
)

// Options configure Start.
type Options struct {
	// Servers is the number of servers (default 1; more form a JetStream
	// cluster named "hostd-test").
	Servers int
	// Tags are each server's JetStream placement tags (optional).
	Tags [][]string
	// SyncAlways sets JetStream's sync_interval to always (fsync before
	// every acknowledgement: the setup docs/cluster.md recommends).
	SyncAlways bool
	// MaxPayload is the server's max_payload (default NATS's 1 MiB).
	MaxPayload int32
	// Dir is the parent of the servers' store dirs (default t.TempDir()).
	Dir string
}

// Cluster is a set of running NATS servers.
type Cluster struct {
	t       testing.TB
	mu      sync.Mutex
	servers []*node
}

type node struct {
	opts *server.Options
	srv  *server.Server
}

// Start starts the servers and waits until they accept connections (and,
// for a cluster, until JetStream has a meta leader).
func Start(t testing.TB, opts Options) *Cluster {
	t.Helper()
	if opts.Servers <= 0 {
		opts.Servers = 1
	}
	if opts.Dir == "" {
		opts.Dir = t.TempDir()
	}
	c := &Cluster{t: t}
	clusterPorts := make([]int, opts.Servers)
	for i := range clusterPorts {
		clusterPorts[i] = testport.Pick(t)
	}
	for i := 0; i < opts.Servers; i++ {
		o := &server.Options{
			ServerName: fmt.Sprintf("n%d", i),
			Host:       "127.0.0.1",
			Port:       testport.Pick(t),
			JetStream:  true,
			StoreDir:   fmt.Sprintf("%s/n%d", opts.Dir, i),
			NoLog:      true,
			NoSigs:     true,
			MaxPayload: opts.MaxPayload,
		}
		if opts.SyncAlways {
			o.SyncAlways = true
		}
		if i < len(opts.Tags) {
			o.Tags = append(o.Tags, opts.Tags[i]...)
		}
		if opts.Servers > 1 {
			o.Cluster = server.ClusterOpts{Name: "hostd-test", Host: "127.0.0.1", Port: clusterPorts[i]}
			var routes []string
			for j, p := range clusterPorts {
				if j != i {
					routes = append(routes, "nats://127.0.0.1:"+strconv.Itoa(p))
				}
			}
			o.Routes = server.RoutesFromStr(strings.Join(routes, ","))
		}
		c.servers = append(c.servers, &node{opts: o})
	}
	t.Cleanup(c.StopAll)
	for i := range c.servers {
		c.Restart(i)
	}
	if opts.Servers > 1 {
		c.waitMetaLeader()
	}
	return c
}

func (c *Cluster) waitMetaLeader() {
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		c.mu.Lock()
		for _, n := range c.servers {
			if n.srv != nil && n.srv.JetStreamIsLeader() {
				c.mu.Unlock()
				return
			}
		}
		c.mu.Unlock()
		time.Sleep(50 * time.Millisecond)
	}
	c.t.Fatalf("natstest: no JetStream meta leader after 60s")
}

// URL is a client URL listing every server (running or not).
func (c *Cluster) URL() string {
	urls := make([]string, len(c.servers))
	for i, n := range c.servers {
		urls[i] = fmt.Sprintf("nats://127.0.0.1:%d", n.opts.Port)
	}
	return strings.Join(urls, ",")
}

// Server returns the running server i (nil when stopped).
func (c *Cluster) Server(i int) *server.Server {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.servers[i].srv
}

// Conn connects to the cluster; the connection is closed at t.Cleanup.
func (c *Cluster) Conn(t testing.TB) *nats.Conn {
	t.Helper()
	nc, err := nats.Connect(c.URL(), nats.MaxReconnects(-1), nats.ReconnectWait(100*time.Millisecond))
	if err != nil {
		t.Fatalf("natstest: connect: %v", err)
	}
	t.Cleanup(nc.Close)
	return nc
}

// Stop shuts server i down (its store dir stays for Restart).
func (c *Cluster) Stop(i int) {
	c.mu.Lock()
	s := c.servers[i].srv
	c.servers[i].srv = nil
	c.mu.Unlock()
	if s != nil {
		s.Shutdown()
		s.WaitForShutdown()
	}
}

// Restart starts server i (again) with its options and store dir.
func (c *Cluster) Restart(i int) {
	c.t.Helper()
	n := c.servers[i]
	o := n.opts.Clone()
	s, err := server.NewServer(o)
	if err != nil {
		c.t.Fatalf("natstest: server %d: %v", i, err)
	}
	go s.Start()
	if !s.ReadyForConnections(30 * time.Second) {
		s.Shutdown()
		c.t.Fatalf("natstest: server %d not ready in 30s", i)
	}
	c.mu.Lock()
	n.srv = s
	c.mu.Unlock()
}

// StopAll stops every running server.
func (c *Cluster) StopAll() {
	for i := range c.servers {
		c.Stop(i)
	}
}

package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// startNATS starts o.natsServers NATS servers with JetStream (the real
// nats-server, github.com/nats-io/nats-server/v2 at the version in go.mod,
// in this process): clients on -nats-port, -nats-port+1, ..., cluster
// routes on -nats-port+100, ...; each server stores under -dir/nats/nI
// with sync_interval: always (every acknowledged append is on disk, the
// setup docs/jetstream-wal.md recommends) and carries the placement tag
// az:zI, so brokers labelled az:z0..z2 land on distinct servers. It
// returns the servers and the client URL list.
func startNATS(o options) ([]*server.Server, string, error) {
	var urls, routes []string
	for i := range o.natsServers {
		urls = append(urls, fmt.Sprintf("nats://127.0.0.1:%d", o.natsPort+i))
		routes = append(routes, fmt.Sprintf("nats://127.0.0.1:%d", o.natsPort+100+i))
	}
	var out []*server.Server
	for i := range o.natsServers {
		so := &server.Options{
			ServerName: fmt.Sprintf("n%d", i),
			Host:       "127.0.0.1",
			Port:       o.natsPort + i,
			JetStream:  true,
			StoreDir:   filepath.Join(o.dir, "nats", fmt.Sprintf("n%d", i)),
			SyncAlways: true,
			Tags:       []string{"az:z" + strconv.Itoa(i)},
			NoSigs:     true,
			LogFile:    filepath.Join(o.dir, "nats", fmt.Sprintf("n%d.log", i)),
		}
		if o.natsServers > 1 {
			so.Cluster = server.ClusterOpts{Name: "hostd-devcluster", Host: "127.0.0.1", Port: o.natsPort + 100 + i}
			var others []string
			for j, r := range routes {
				if j != i {
					others = append(others, r)
				}
			}
			so.Routes = server.RoutesFromStr(strings.Join(others, ","))
		}
		if err := os.MkdirAll(so.StoreDir, 0o755); err != nil {
			return out, "", err
		}
		s, err := server.NewServer(so)
		if err != nil {
			return out, "", fmt.Errorf("nats server n%d: %w", i, err)
		}
		s.ConfigureLogger()
		go s.Start()
		out = append(out, s)
	}
	for i, s := range out {
		if !s.ReadyForConnections(60 * time.Second) {
			return out, "", fmt.Errorf("nats server n%d not accepting connections after 60s (see %s)", i, filepath.Join(o.dir, "nats"))
		}
	}
	// A JetStream cluster serves streams once it has a meta leader.
	deadline := time.Now().Add(60 * time.Second)
	for o.natsServers > 1 {
		for _, s := range out {
			if s.JetStreamIsLeader() {
				return out, strings.Join(urls, ","), nil
			}
		}
		if time.Now().After(deadline) {
			return out, "", errors.New("nats: no JetStream meta leader after 60s")
		}
		time.Sleep(100 * time.Millisecond)
	}
	return out, strings.Join(urls, ","), nil
}

// stopNATS shuts the servers down and waits for each.
func stopNATS(servers []*server.Server) {
	for _, s := range servers {
		s.Shutdown()
	}
	for _, s := range servers {
		s.WaitForShutdown()
	}
}

package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// Combinations of catalog.*, cluster.* and wal.*: each mistake is named with the
// key at fault and a message that says why.
func TestClusterCombinations(t *testing.T) {
	etcd := func(c *Config) {
		c.Catalog.Backend = CatalogEtcd
		c.Catalog.Etcd.Endpoints = []string{"http://127.0.0.1:2379"}
	}
	js := func(c *Config) {
		c.WAL.Backend = WALJetStream
		c.WAL.JetStream.URL = "nats://127.0.0.1:4222,nats://127.0.0.1:4223"
	}
	for _, tc := range []struct {
		name    string
		mut     func(*Config)
		key     string // "" = valid
		message string
	}{
		{"default embedded", func(*Config) {}, "", ""},
		{"etcd minimal", etcd, "", ""},
		{"etcd without endpoints", func(c *Config) { c.Catalog.Backend = CatalogEtcd }, "catalog.etcd.endpoints", "required with catalog.backend etcd"},
		{"node name without etcd", func(c *Config) { c.Cluster.NodeName = "a" }, "cluster.node_name", "set catalog.backend to etcd"},
		{"advertise without etcd", func(c *Config) { c.Cluster.Advertise = "http://h:7070" }, "cluster.advertise", "set catalog.backend to etcd"},
		{"endpoints without etcd", func(c *Config) { c.Catalog.Etcd.Endpoints = []string{"http://h:2379"} }, "catalog.etcd.endpoints", "catalog.backend is \"badger\""},
		{"unknown backend", func(c *Config) { c.Catalog.Backend = "postgres" }, "catalog.backend", "must be one of badger, etcd"},
		{"bad endpoint", func(c *Config) { etcd(c); c.Catalog.Etcd.Endpoints = []string{"127.0.0.1:2379"} }, "catalog.etcd.endpoints", "not an http:// or https:// URL"},
		{"bad prefix", func(c *Config) { etcd(c); c.Catalog.Etcd.Prefix = "hostd" }, "catalog.etcd.prefix", "start and end with"},
		{"user without password", func(c *Config) { etcd(c); c.Catalog.Etcd.Username = "u" }, "catalog.etcd.password", "both"},
		{"cert without key", func(c *Config) { etcd(c); c.Catalog.Etcd.TLS.CertFile = "c.pem" }, "catalog.etcd.tls.key_file", "both"},
		{"tiny txn ops", func(c *Config) { etcd(c); c.Catalog.Etcd.MaxTxnOps = 2 }, "catalog.etcd.max_txn_ops", "at least 8"},
		{"ttl below 2s", func(c *Config) { etcd(c); c.Cluster.ElectionTTL = time.Second }, "cluster.election_ttl", "at least 2s"},
		{"ttl fractional", func(c *Config) { etcd(c); c.Cluster.ElectionTTL = 2500 * time.Millisecond }, "cluster.election_ttl", "whole seconds"},
		{"wildcard listen needs advertise", func(c *Config) {
			etcd(c)
			c.API.Listen = "0.0.0.0:7070"
			c.API.Tokens = []Token{{Name: "a", Token: strings.Repeat("x", 16), Role: "admin"}}
		}, "cluster.advertise", "required when api.listen"},
		{"bad advertise", func(c *Config) { etcd(c); c.Cluster.Advertise = "h:7070" }, "cluster.advertise", "base URL"},
		{"in-memory in cluster", func(c *Config) { etcd(c); c.Data.InMemory = true }, "data.in_memory", "not allowed in cluster mode"},
		{"slash in node name", func(c *Config) { etcd(c); c.Cluster.NodeName = "a/b" }, "cluster.node_name", "may not contain"},
		// wal.* (physical queues on JetStream) with either catalog.
		{"jetstream with etcd", func(c *Config) { etcd(c); js(c) }, "", ""},
		{"jetstream embedded", js, "", ""},
		{"jetstream without url", func(c *Config) { c.WAL.Backend = WALJetStream }, "wal.jetstream.url", "required with wal.backend jetstream"},
		{"url without jetstream", func(c *Config) { c.WAL.JetStream.URL = "nats://h:4222" }, "wal.jetstream.url", "set wal.backend to jetstream"},
		{"unknown wal backend", func(c *Config) { c.WAL.Backend = "kafka" }, "wal.backend", "must be one of catalog, jetstream"},
		{"bad nats url", func(c *Config) { js(c); c.WAL.JetStream.URL = "nats://a:4222,http://b:4222" }, "wal.jetstream.url", "not a nats://"},
		{"two nats auths", func(c *Config) { js(c); c.WAL.JetStream.Token = "t"; c.WAL.JetStream.CredsFile = "c.creds" }, "wal.jetstream.creds_file", "use one of"},
		{"nats user without password", func(c *Config) { js(c); c.WAL.JetStream.User = "u" }, "wal.jetstream.password", "both"},
		{"two replicas", func(c *Config) { js(c); c.WAL.JetStream.Replicas = 2 }, "wal.jetstream.replicas", "must be 1, 3 or 5"},
		{"bad storage", func(c *Config) { js(c); c.WAL.JetStream.Storage = "disk" }, "wal.jetstream.storage", "must be one of file, memory"},
		{"bad stream prefix", func(c *Config) { js(c); c.WAL.JetStream.StreamPrefix = "a.b" }, "wal.jetstream.stream_prefix", "[A-Za-z0-9_-]"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := Default()
			tc.mut(&c)
			err := c.Validate()
			if tc.key == "" {
				if err != nil {
					t.Fatalf("want valid, got %v", err)
				}
				return
			}
			ve, ok := err.(*ValidationError)
			if !ok {
				t.Fatalf("want a *ValidationError at %s, got %v", tc.key, err)
			}
			for _, p := range ve.Problems {
				if p.Key == tc.key && strings.Contains(p.Message, tc.message) {
					return
				}
			}
			t.Fatalf("no problem at %s containing %q in:\n%v", tc.key, tc.message, err)
		})
	}
}

func TestAdvertiseURL(t *testing.T) {
	c := Default()
	if got := c.AdvertiseURL(); got != "http://127.0.0.1:7070" {
		t.Fatalf("derived: %q", got)
	}
	c.Cluster.Advertise = "https://h:1/"
	if got := c.AdvertiseURL(); got != "https://h:1" {
		t.Fatalf("explicit: %q", got)
	}
}

// examples/hostd-cluster.yaml, the cluster example docs/cluster.md points
// to, loads and is valid (with its token file in place: the test writes
// one and points the example at it).
func TestClusterExampleLoads(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join("..", "..", "examples", "hostd-cluster.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	tok := filepath.Join(t.TempDir(), "admin.token")
	if err := os.WriteFile(tok, []byte(strings.Repeat("s", 32)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "cluster.yaml")
	if err := os.WriteFile(file, []byte(strings.ReplaceAll(string(raw), "/etc/hostd/admin.token", tok)), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg, err := Load(Source{File: file, Env: []string{}})
	if err != nil {
		t.Fatalf("examples/hostd-cluster.yaml: %v", err)
	}
	if !cfg.ClusterMode() || cfg.Cluster.NodeName != "hostd-0" || len(cfg.Catalog.Etcd.Endpoints) != 3 {
		t.Fatalf("example loaded as %+v / %+v", cfg.Catalog, cfg.Cluster)
	}
}

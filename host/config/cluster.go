package config

import (
	"net"
	"net/url"
	"strings"
	"time"
)

// Catalog selects where durable state lives: the embedded Badger data dir
// (the default: one process, no other service) or an etcd cluster shared by
// several hostd replicas (cluster mode, see docs/cluster.md).
type Catalog struct {
	// Backend is "badger" (embedded, in data.dir) or "etcd" (cluster mode:
	// one leader elected through etcd, any replica serves the API).
	// Default "badger".
	Backend string `koanf:"backend"`
	// Etcd is the etcd cluster holding the catalog when Backend is "etcd".
	Etcd Etcd `koanf:"etcd"`
}

// Etcd is how hostd reaches its etcd cluster.
type Etcd struct {
	// Endpoints are the client URLs of the etcd members, e.g.
	// ["http://10.0.0.1:2379"]. Required with backend etcd.
	Endpoints []string `koanf:"endpoints"`
	// Prefix is the key prefix of this hostd cluster, so several share one
	// etcd. Must start and end with "/". Default "/hostd/".
	Prefix string `koanf:"prefix"`
	// Username and Password authenticate to etcd (both or neither).
	Username string `koanf:"username"`
	Password string `koanf:"password"`
	// TLS is the client TLS to etcd (https endpoints).
	TLS EtcdTLS `koanf:"tls"`
	// DialTimeout bounds connecting to etcd at start. Default 5s.
	DialTimeout time.Duration `koanf:"dial_timeout"`
	// RequestTimeout bounds one etcd request. Default 10s.
	RequestTimeout time.Duration `koanf:"request_timeout"`
	// MaxTxnOps mirrors the etcd servers' --max-txn-ops (default 128):
	// commit rounds are split to fit it.
	MaxTxnOps int `koanf:"max_txn_ops"`
	// MaxRequestBytes mirrors the etcd servers' --max-request-bytes
	// (default 1.5MiB): a write that can never fit is refused before
	// anything is acknowledged.
	MaxRequestBytes ByteSize `koanf:"max_request_bytes"`
}

// EtcdTLS is the client side of TLS to etcd.
type EtcdTLS struct {
	// CAFile verifies the etcd servers' certificates (PEM). Empty: the
	// system pool.
	CAFile string `koanf:"ca_file"`
	// CertFile and KeyFile are a client certificate (both or neither).
	CertFile string `koanf:"cert_file"`
	KeyFile  string `koanf:"key_file"`
}

// Cluster is this replica's part in cluster mode (catalog.backend etcd).
type Cluster struct {
	// NodeName names this replica in the election and in GET /v1/cluster;
	// unique per cluster. Default: the host name.
	NodeName string `koanf:"node_name"`
	// Advertise is the base URL the other replicas forward requests to,
	// e.g. "http://10.0.0.5:7070". Default: derived from api.listen (only
	// right when api.listen names a reachable address).
	Advertise string `koanf:"advertise"`
	// ElectionTTL is the lease TTL of the leader's etcd session: a leader
	// that stops renewing it (crash, pause, partition) loses office this
	// long after its last renewal. Whole seconds, at least 2s. Default 10s.
	ElectionTTL time.Duration `koanf:"election_ttl"`
}

const (
	// CatalogBadger and CatalogEtcd are the catalog.backend values.
	CatalogBadger = "badger"
	CatalogEtcd   = "etcd"
)

func defaultCatalog() Catalog {
	return Catalog{
		Backend: CatalogBadger,
		Etcd: Etcd{
			Prefix:          "/hostd/",
			DialTimeout:     5 * time.Second,
			RequestTimeout:  10 * time.Second,
			MaxTxnOps:       128,
			MaxRequestBytes: 3 << 19, // 1.5 MiB, etcd's default
		},
	}
}

func defaultCluster() Cluster {
	return Cluster{ElectionTTL: 10 * time.Second}
}

// ClusterMode reports whether c runs as a replica of a cluster (etcd
// catalog): elected leader, forwarding followers.
func (c *Config) ClusterMode() bool { return c.Catalog.Backend == CatalogEtcd }

func (c *Catalog) validate(p *problems) {
	p.oneOf("catalog.backend", c.Backend, CatalogBadger, CatalogEtcd)
	e := &c.Etcd
	if c.Backend == CatalogEtcd && len(e.Endpoints) == 0 {
		p.addOnce("catalog.etcd.endpoints", "required with catalog.backend etcd: the client URLs of the etcd members, e.g. [\"http://127.0.0.1:2379\"]")
	}
	for _, ep := range e.Endpoints {
		u, err := url.Parse(ep)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			p.addOnce("catalog.etcd.endpoints", "%q is not an http:// or https:// URL with a host", ep)
			break
		}
	}
	if !strings.HasPrefix(e.Prefix, "/") || !strings.HasSuffix(e.Prefix, "/") || len(e.Prefix) < 2 {
		p.addOnce("catalog.etcd.prefix", "must start and end with \"/\" and name something, e.g. \"/hostd/\", got %q", e.Prefix)
	}
	if (e.Username == "") != (e.Password == "") {
		p.addOnce("catalog.etcd.password", "set both catalog.etcd.username and catalog.etcd.password, or neither")
	}
	if (e.TLS.CertFile == "") != (e.TLS.KeyFile == "") {
		p.addOnce("catalog.etcd.tls.key_file", "set both catalog.etcd.tls.cert_file and key_file, or neither")
	}
	positive(p, "catalog.etcd.dial_timeout", e.DialTimeout)
	positive(p, "catalog.etcd.request_timeout", e.RequestTimeout)
	if e.MaxTxnOps < 8 {
		p.addOnce("catalog.etcd.max_txn_ops", "must be at least 8 (etcd's default is 128), got %d", e.MaxTxnOps)
	}
	if e.MaxRequestBytes < 64<<10 {
		p.addOnce("catalog.etcd.max_request_bytes", "must be at least 64KiB (etcd's default is 1.5MiB), got %s", e.MaxRequestBytes)
	}
}

func (c *Config) validateCluster(p *problems) {
	cl := &c.Cluster
	if cl.ElectionTTL < 2*time.Second || cl.ElectionTTL%time.Second != 0 {
		p.addOnce("cluster.election_ttl", "must be whole seconds, at least 2s (etcd leases count in seconds), got %s", cl.ElectionTTL)
	}
	if !c.ClusterMode() {
		// A replica setting without a shared catalog would start a
		// second, unrelated single-node hostd: almost surely a mistake.
		why := "only means something in cluster mode: set catalog.backend to etcd (with the embedded catalog each hostd is alone and has no peers)"
		if cl.NodeName != "" {
			p.addOnce("cluster.node_name", "%s", why)
		}
		if cl.Advertise != "" {
			p.addOnce("cluster.advertise", "%s", why)
		}
		if len(c.Catalog.Etcd.Endpoints) > 0 {
			p.addOnce("catalog.etcd.endpoints", "set, but catalog.backend is %q: set catalog.backend to etcd to use them", c.Catalog.Backend)
		}
		return
	}
	if strings.ContainsAny(cl.NodeName, "/ \t\n") {
		p.addOnce("cluster.node_name", "may not contain \"/\" or spaces, got %q", cl.NodeName)
	}
	if cl.Advertise != "" {
		u, err := url.Parse(cl.Advertise)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || (u.Path != "" && u.Path != "/") {
			p.addOnce("cluster.advertise", "must be a base URL such as \"http://10.0.0.5:7070\", got %q", cl.Advertise)
		}
	} else if host, _, err := net.SplitHostPort(c.API.Listen); err == nil && (host == "" || host == "0.0.0.0" || host == "::") {
		p.addOnce("cluster.advertise", "required when api.listen (%q) binds every interface: the other replicas need an address to forward to", c.API.Listen)
	}
	if c.Data.InMemory {
		p.addOnce("data.in_memory", "not allowed in cluster mode: state lives in etcd; data.dir keeps only this replica's trace files")
	}
}

// AdvertiseURL is where the other replicas reach this one: cluster.advertise,
// else derived from api.listen and api.tls.
func (c *Config) AdvertiseURL() string {
	if c.Cluster.Advertise != "" {
		return strings.TrimSuffix(c.Cluster.Advertise, "/")
	}
	scheme := "http"
	if c.API.TLS.CertFile != "" {
		scheme = "https"
	}
	return scheme + "://" + c.API.Listen
}

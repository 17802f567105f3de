package config

import (
	"net/url"
	"regexp"
	"strings"
	"time"
)

// WAL selects where physical queues (the vchannels' and topics' data) live:
// in the catalog (the default: the embedded WAL, on Badger or etcd) or on
// NATS JetStream, a log that survives the loss of a machine and that
// operators already run (docs/jetstream-wal.md).
type WAL struct {
	// Backend is "catalog" (queues in the catalog) or "jetstream" (one
	// JetStream stream per physical queue). Default "catalog".
	Backend string `koanf:"backend"`
	// JetStream is the NATS JetStream cluster when Backend is "jetstream".
	JetStream JetStream `koanf:"jetstream"`
}

// JetStream is how hostd reaches NATS JetStream.
type JetStream struct {
	// URL is the NATS server list, comma separated, e.g.
	// "nats://10.0.0.1:4222,nats://10.0.0.2:4222". Required with backend
	// jetstream.
	URL string `koanf:"url"`
	// CredsFile is a NATS credentials file (JWT + NKey). Use one of
	// creds_file, user/password and token.
	CredsFile string `koanf:"creds_file"`
	// User and Password authenticate with a user (both or neither).
	User     string `koanf:"user"`
	Password string `koanf:"password"`
	// Token authenticates with a token.
	Token string `koanf:"token"`
	// Replicas of every stream: 1, 3 or 5. 3 survives the loss of one
	// server. Default 3.
	Replicas int `koanf:"replicas"`
	// Storage of every stream: "file" (durable; run the servers with
	// sync_interval: always, see docs/jetstream-wal.md) or "memory"
	// (tests). Default "file".
	Storage string `koanf:"storage"`
	// StreamPrefix starts every stream name and subject hostd creates, so
	// several hostd clusters can share one NATS ([A-Za-z0-9_-], at most 32
	// bytes). Default "HOSTD".
	StreamPrefix string `koanf:"stream_prefix"`
	// RequestTimeout bounds one JetStream request. Default 5s.
	RequestTimeout time.Duration `koanf:"request_timeout"`
	// DuplicateWindow is each stream's Nats-Msg-Id duplicate window.
	// Exactly-once appends do not depend on it (hostd reconciles by
	// scanning), it only makes retries cheaper. Default 2m.
	DuplicateWindow time.Duration `koanf:"duplicate_window"`
}

const (
	// WALCatalog and WALJetStream are the wal.backend values.
	WALCatalog   = "catalog"
	WALJetStream = "jetstream"
)

func defaultWAL() WAL {
	return WAL{
		Backend: WALCatalog,
		JetStream: JetStream{
			Replicas:        3,
			Storage:         "file",
			StreamPrefix:    "HOSTD",
			RequestTimeout:  5 * time.Second,
			DuplicateWindow: 2 * time.Minute,
		},
	}
}

var streamPrefixRE = regexp.MustCompile(`^[A-Za-z0-9_-]{1,32}$`)

func (w *WAL) validate(p *problems) {
	p.oneOf("wal.backend", w.Backend, WALCatalog, WALJetStream)
	j := &w.JetStream
	if w.Backend == WALJetStream && j.URL == "" {
		p.addOnce("wal.jetstream.url", "required with wal.backend jetstream: the NATS servers, e.g. \"nats://127.0.0.1:4222\"")
	}
	if w.Backend != WALJetStream && j.URL != "" {
		p.addOnce("wal.jetstream.url", "set, but wal.backend is %q: set wal.backend to jetstream to use it", w.Backend)
	}
	for _, s := range strings.Split(j.URL, ",") {
		if j.URL == "" {
			break
		}
		u, err := url.Parse(strings.TrimSpace(s))
		if err != nil || (u.Scheme != "nats" && u.Scheme != "tls" && u.Scheme != "ws" && u.Scheme != "wss") || u.Host == "" {
			p.addOnce("wal.jetstream.url", "%q is not a nats://, tls://, ws:// or wss:// URL with a host", s)
			break
		}
	}
	auth := 0
	if j.CredsFile != "" {
		auth++
	}
	if j.User != "" || j.Password != "" {
		auth++
		if (j.User == "") != (j.Password == "") {
			p.addOnce("wal.jetstream.password", "set both wal.jetstream.user and wal.jetstream.password, or neither")
		}
	}
	if j.Token != "" {
		auth++
	}
	if auth > 1 {
		p.addOnce("wal.jetstream.creds_file", "use one of creds_file, user/password and token")
	}
	switch j.Replicas {
	case 1, 3, 5:
	default:
		p.addOnce("wal.jetstream.replicas", "must be 1, 3 or 5 (JetStream's stream replica counts), got %d", j.Replicas)
	}
	p.oneOf("wal.jetstream.storage", j.Storage, "file", "memory")
	if !streamPrefixRE.MatchString(j.StreamPrefix) {
		p.addOnce("wal.jetstream.stream_prefix", "must be 1-32 of [A-Za-z0-9_-] (it starts stream names and subjects), got %q", j.StreamPrefix)
	}
	positive(p, "wal.jetstream.request_timeout", j.RequestTimeout)
	positive(p, "wal.jetstream.duplicate_window", j.DuplicateWindow)
}

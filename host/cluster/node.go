package cluster

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
	"go.uber.org/zap"

	"github.com/hostd-dev/hostd/host"
	"github.com/hostd-dev/hostd/host/api"
	"github.com/hostd-dev/hostd/host/config"
	"github.com/hostd-dev/hostd/host/telemetry"
	"github.com/hostd-dev/hostd/runtime/catalog"
	"github.com/hostd-dev/hostd/runtime/failpoint"
	"github.com/hostd-dev/hostd/runtime/sched"
)

// HopHeader marks a request forwarded by a follower (its value is the
// follower's name). A replica that is not the leader answers such a
// request 503 instead of forwarding it again.
const HopHeader = "Hostd-Forwarded"

// Options are the parts of a Node that do not come from the config file.
type Options struct {
	// Version describes the binary (served at /v1/version and in
	// /v1/cluster).
	Version api.VersionInfo
	// LogOutput receives the logs. Default os.Stderr.
	LogOutput io.Writer
	// Logger replaces the logger built from cfg.Log (tests).
	Logger *slog.Logger
	// Clock is the time source of every term's components. Default
	// sched.Real.
	Clock sched.Clock
	// WrapAPI wraps the front server's handler (tests: spec checks).
	WrapAPI func(http.Handler) http.Handler
}

// Node is one replica of a cluster-mode hostd.
type Node struct {
	cfg       *config.Config
	opts      Options
	name      string
	advertise string
	log       *slog.Logger
	tel       *telemetry.Providers
	cli       *clientv3.Client
	cat       termCatalog
	front     *api.Server
	transport *http.Transport
	prefix    string // the cluster's own keys: election, members
	joined    time.Time
	m         *metrics

	mu      sync.Mutex
	leader  *leaderInfo // as observed in etcd; nil during an election
	term    *termState  // this replica's term while it leads
	changed chan struct{}

	precompiled chan struct{} // closed when the plugin precompile is over
	hashes      fileHashes    // plugin file hashes (/v1/cluster, /readyz)
	reload      reloadState   // plugin reloads (reload.go)

	stopOnce  sync.Once
	stopped   chan struct{}
	waitLoops func() // waits for the observe and campaign loops (set by Start)
}

// leaderInfo is the election value plus what etcd knows of the key.
type leaderInfo struct {
	Name    string `json:"name"`
	Address string `json:"address"`
	term    int64
	since   time.Time
}

type termState struct {
	term int64
	host *host.Host // nil while the term's Host starts
}

// termCatalog is the etcd catalog as a replica uses it: one store per
// leader term, fenced on that term's election key.
type termCatalog interface {
	fenced(key string, term int64, onFenced func()) catalog.Store
	base() catalog.Store // unfenced: reads only (plugin precompile)
	Close() error
}

// Open connects to etcd, opens the catalog and binds nothing yet; Run
// serves. On error everything opened is closed again.
func Open(ctx context.Context, cfg *config.Config, opts Options) (_ *Node, err error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if !cfg.ClusterMode() {
		return nil, errors.New("cluster: catalog.backend is not etcd: run the embedded host instead")
	}
	if opts.LogOutput == nil {
		opts.LogOutput = os.Stderr
	}
	if opts.Clock == nil {
		opts.Clock = sched.Real
	}
	n := &Node{cfg: cfg, opts: opts, changed: make(chan struct{}), stopped: make(chan struct{}), precompiled: make(chan struct{}),
		joined: time.Now().UTC().Truncate(time.Millisecond)}
	n.log = opts.Logger
	if n.log == nil {
		if n.log, err = telemetry.NewLogger(cfg.Log, opts.LogOutput); err != nil {
			return nil, err
		}
	}
	n.name = cfg.Cluster.NodeName
	if n.name == "" {
		if n.name, err = os.Hostname(); err != nil {
			return nil, fmt.Errorf("cluster: cluster.node_name is empty and the host name is unknown: %w", err)
		}
	}
	n.advertise = cfg.AdvertiseURL()
	n.log = n.log.With("node", n.name)
	n.prefix = strings.TrimSuffix(cfg.Catalog.Etcd.Prefix, "/") + ".cluster/"
	defer func() {
		if err != nil {
			n.closeResources(context.WithoutCancel(ctx))
		}
	}()
	if err := os.MkdirAll(cfg.Data.Dir, 0o755); err != nil {
		return nil, fmt.Errorf("cluster: data dir (this replica's trace files and plugin cache): %w", err)
	}
	n.tel, err = telemetry.New(ctx, cfg.Telemetry, telemetry.Options{
		ServiceVersion: opts.Version.Version, DataDir: cfg.Data.Dir, Logger: n.log,
	})
	if err != nil {
		return nil, err
	}
	n.m = newMetrics(n)
	if n.cli, err = dialEtcd(ctx, cfg); err != nil {
		return nil, err
	}
	if n.cat, err = openCatalog(ctx, n); err != nil {
		return nil, err
	}
	tokens, err := host.APITokens(cfg)
	if err != nil {
		return nil, err
	}
	n.transport = http.DefaultTransport.(*http.Transport).Clone()
	n.transport.MaxIdleConnsPerHost = 64
	n.front, err = api.New(api.Options{
		Listen:            cfg.API.Listen,
		TLSCertFile:       cfg.API.TLS.CertFile,
		TLSKeyFile:        cfg.API.TLS.KeyFile,
		Tokens:            tokens,
		RequestTimeout:    cfg.API.RequestTimeout,
		MaxBodyBytes:      int64(cfg.API.MaxBodyBytes),
		ReadHeaderTimeout: cfg.API.ReadHeaderTimeout,
		IdleTimeout:       cfg.API.IdleTimeout,
		Logger:            n.log.With("component", "api"),
		TracerProvider:    n.tel.TracerProvider,
		MeterProvider:     n.tel.MeterProvider,
		Metrics:           n.tel.Metrics,
		Version:           opts.Version,
		Ready:             n.notReady,
		Clock:             opts.Clock,
		Wrap:              opts.WrapAPI,
		Fallback:          http.HandlerFunc(n.route),
	})
	if err != nil {
		return nil, err
	}
	n.front.Handle("GET /v1/cluster", api.RoleRead, n.handleCluster)
	n.registerFanOut() // traces and plugin reload reach every member (fanout.go)
	return n, nil
}

// dialEtcd builds the etcd client from catalog.etcd.
func dialEtcd(ctx context.Context, cfg *config.Config) (*clientv3.Client, error) {
	e := cfg.Catalog.Etcd
	cc := clientv3.Config{
		Endpoints:   e.Endpoints,
		DialTimeout: e.DialTimeout,
		Username:    e.Username,
		Password:    e.Password,
		Context:     context.WithoutCancel(ctx),
		// A replica that loses etcd must notice within its election TTL.
		DialKeepAliveTime:    cfg.Cluster.ElectionTTL / 2,
		DialKeepAliveTimeout: cfg.Cluster.ElectionTTL / 2,
		MaxCallSendMsgSize:   int(e.MaxRequestBytes) + 64<<10,
		// The client's own zap logs (every retried RPC at warn) would
		// bury hostd's; what matters surfaces as errors hostd logs.
		Logger: zap.NewNop(),
	}
	if e.TLS.CAFile != "" || e.TLS.CertFile != "" || hasHTTPS(e.Endpoints) {
		tc := &tls.Config{MinVersion: tls.VersionTLS12}
		if e.TLS.CAFile != "" {
			pem, err := os.ReadFile(e.TLS.CAFile)
			if err != nil {
				return nil, fmt.Errorf("cluster: catalog.etcd.tls.ca_file: %w", err)
			}
			pool := x509.NewCertPool()
			if !pool.AppendCertsFromPEM(pem) {
				return nil, fmt.Errorf("cluster: catalog.etcd.tls.ca_file %s holds no PEM certificate", e.TLS.CAFile)
			}
			tc.RootCAs = pool
		}
		if e.TLS.CertFile != "" {
			cert, err := tls.LoadX509KeyPair(e.TLS.CertFile, e.TLS.KeyFile)
			if err != nil {
				return nil, fmt.Errorf("cluster: catalog.etcd.tls client certificate: %w", err)
			}
			tc.Certificates = []tls.Certificate{cert}
		}
		cc.TLS = tc
	}
	cli, err := clientv3.New(cc)
	if err != nil {
		return nil, fmt.Errorf("cluster: connect to etcd %v: %w", e.Endpoints, err)
	}
	// clientv3.New does not wait for a connection: check one now so a
	// wrong endpoint fails the start with a clear message.
	sctx, cancel := context.WithTimeout(ctx, e.DialTimeout)
	defer cancel()
	if _, err := cli.Get(sctx, "health-probe", clientv3.WithCountOnly()); err != nil {
		_ = cli.Close()
		return nil, fmt.Errorf("cluster: etcd at %v does not answer within catalog.etcd.dial_timeout (%s): %w", e.Endpoints, e.DialTimeout, err)
	}
	return cli, nil
}

func hasHTTPS(eps []string) bool {
	for _, e := range eps {
		if strings.HasPrefix(e, "https://") {
			return true
		}
	}
	return false
}

// Name is this replica's name.
func (n *Node) Name() string { return n.name }

// URL is the front server's base URL (after Start).
func (n *Node) URL() string { return n.front.URL() }

// Start binds the front server and begins observing and campaigning. It
// returns once the API listens; leadership follows in the background.
func (n *Node) Start(ctx context.Context) error {
	if err := n.front.Start(); err != nil {
		return err
	}
	if n.cfg.Cluster.Advertise == "" {
		n.advertise = n.front.URL() // the bound port, also for api.listen ":0"
	}
	runCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	var wg sync.WaitGroup
	wg.Add(3)
	go func() { defer wg.Done(); n.observe(runCtx) }()
	go func() { defer wg.Done(); n.campaignLoop(runCtx) }()
	go func() { defer wg.Done(); n.precompile(runCtx) }()
	go func() {
		<-n.stopped
		cancel()
	}()
	n.waitLoops = func() { wg.Wait() }
	n.log.Info("hostd replica started", "addr", n.front.URL(), "advertise", n.advertise,
		"etcd", n.cfg.Catalog.Etcd.Endpoints, "prefix", n.cfg.Catalog.Etcd.Prefix, "version", n.opts.Version.Version)
	return nil
}

// Run starts the node, waits until ctx is done, then shuts down: a
// leader resigns first, so another replica takes over at once.
func (n *Node) Run(ctx context.Context) error {
	return host.RunUntilDone(ctx, n, n.log, n.cfg.API.ShutdownTimeout)
}

// Shutdown resigns (if leading), stops the term's Host, stops serving,
// and closes etcd and telemetry.
func (n *Node) Shutdown(ctx context.Context) error {
	n.stopOnce.Do(func() { close(n.stopped) })
	if n.waitLoops != nil {
		n.waitLoops() // the campaign loop resigns and stops the term's Host
	}
	var errs []error
	if err := n.front.Shutdown(ctx); err != nil {
		errs = append(errs, fmt.Errorf("cluster: api shutdown: %w", err))
	}
	errs = append(errs, n.closeResources(ctx)...)
	n.log.Info("hostd replica stopped")
	return errors.Join(errs...)
}

func (n *Node) closeResources(ctx context.Context) []error {
	var errs []error
	if n.cat != nil {
		if err := n.cat.Close(); err != nil {
			errs = append(errs, fmt.Errorf("cluster: close catalog: %w", err))
		}
	}
	if n.cli != nil {
		if err := n.cli.Close(); err != nil && !errors.Is(err, context.Canceled) {
			errs = append(errs, fmt.Errorf("cluster: close etcd client: %w", err))
		}
	}
	if n.transport != nil {
		n.transport.CloseIdleConnections()
	}
	if n.tel != nil {
		if err := n.tel.Shutdown(ctx); err != nil {
			errs = append(errs, fmt.Errorf("cluster: telemetry shutdown: %w", err))
		}
	}
	return errs
}

// precompile compiles the plugins into data.dir/wasm-cache while this
// replica follows, so that a term it leads later starts its plugins from
// the cache (a cold compile takes seconds, all of it failover time).
// /readyz waits for it; a plugin that does not compile is logged (the
// term's Host reports it again when it loads).
func (n *Node) precompile(ctx context.Context) {
	defer close(n.precompiled)
	start := time.Now()
	if err := host.PrecompilePlugins(ctx, n.cfg, n.cat.base()); err != nil {
		n.log.Warn("plugin precompile", "err", err)
		return
	}
	n.log.Info("plugins precompiled", "duration", time.Since(start).Round(time.Millisecond))
}

// notify wakes every request waiting for a leader. Call with n.mu held.
func (n *Node) notifyLocked() {
	close(n.changed)
	n.changed = make(chan struct{})
}

func (n *Node) electionPrefix() string { return n.prefix + "election/" }
func (n *Node) membersPrefix() string  { return n.prefix + "members/" }

// observe follows the election in etcd: the leader is the election key
// with the lowest create revision.
func (n *Node) observe(ctx context.Context) {
	for ctx.Err() == nil {
		rctx, cancel := context.WithTimeout(ctx, n.cfg.Catalog.Etcd.RequestTimeout)
		resp, err := n.cli.Get(rctx, n.electionPrefix(), clientv3.WithFirstCreate()...)
		cancel()
		if err != nil {
			if ctx.Err() == nil {
				n.log.Warn("cannot read the election; leader unknown", "err", err)
				n.setLeader(nil)
				sleepCtx(ctx, 500*time.Millisecond)
			}
			continue
		}
		var li *leaderInfo
		if len(resp.Kvs) > 0 {
			li = &leaderInfo{}
			if err := json.Unmarshal(resp.Kvs[0].Value, li); err != nil || li.Name == "" {
				n.log.Error("undecodable election value; ignoring it", "key", string(resp.Kvs[0].Key), "err", err)
				li = nil
			} else {
				li.term = resp.Kvs[0].CreateRevision
			}
		}
		n.setLeader(li)
		wctx, wcancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
		wch := n.cli.Watch(wctx, n.electionPrefix(), clientv3.WithPrefix(), clientv3.WithRev(resp.Header.Revision+1))
		for wr := range wch {
			if wr.Err() != nil || len(wr.Events) > 0 {
				break
			}
		}
		wcancel()
	}
}

func (n *Node) setLeader(li *leaderInfo) {
	n.mu.Lock()
	defer n.mu.Unlock()
	old := n.leader
	if old != nil && li != nil && old.term == li.term {
		return
	}
	if old == nil && li == nil {
		return
	}
	if li != nil {
		li.since = time.Now().UTC().Truncate(time.Millisecond)
		n.m.leaderChanges.Add(context.Background(), 1)
		n.log.Info("leader", "leader", li.Name, "term", li.term, "address", li.Address)
	} else {
		n.log.Warn("no leader")
	}
	n.leader = li
	n.notifyLocked()
}

// campaignLoop campaigns with a fresh session after every term or lost
// session until the node stops.
func (n *Node) campaignLoop(ctx context.Context) {
	backoff := 200 * time.Millisecond
	for ctx.Err() == nil {
		err := n.session(ctx)
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			n.log.Warn("campaign ended", "err", err, "retry_in", backoff)
			sleepCtx(ctx, backoff)
			backoff = min(2*backoff, 2*time.Second)
			continue
		}
		backoff = 200 * time.Millisecond
	}
}

// session runs one etcd session: register as a member, campaign, lead
// until the term ends.
func (n *Node) session(ctx context.Context) error {
	ttl := int(n.cfg.Cluster.ElectionTTL / time.Second)
	sess, err := concurrency.NewSession(n.cli, concurrency.WithTTL(ttl), concurrency.WithContext(ctx))
	if err != nil {
		return fmt.Errorf("etcd session: %w", err)
	}
	defer func() {
		// Revokes the lease: the member record and any election key go
		// at once instead of after the TTL.
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		sess.Orphan()
		_, _ = n.cli.Revoke(cctx, sess.Lease())
	}()
	memberDone := make(chan struct{})
	defer close(memberDone)
	go n.keepMember(ctx, sess, memberDone)

	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stopOnLoss := context.AfterFunc(sess.Ctx(), cancel) // a lost session ends the campaign
	defer stopOnLoss()
	el := concurrency.NewElection(sess, n.electionPrefix())
	val, _ := json.Marshal(leaderInfo{Name: n.name, Address: n.advertise})
	if err := el.Campaign(cctx, string(val)); err != nil {
		return fmt.Errorf("campaign: %w", err)
	}
	return n.lead(ctx, sess, el)
}

// lead runs one term: a fresh Host on a store fenced on the term, until
// the session is lost, a commit is fenced, or the node stops.
func (n *Node) lead(ctx context.Context, sess *concurrency.Session, el *concurrency.Election) error {
	term := el.Rev()
	log := n.log.With("term", term)
	fenced := make(chan struct{})
	var fenceOnce sync.Once
	stepDown := func() { fenceOnce.Do(func() { close(fenced) }) }
	store := &countingStore{Store: n.cat.fenced(el.Key(), term, stepDown), m: n.m}
	// A JetStream queue fenced by a newer term is the same news as a
	// fenced commit: count it, step down.
	queueFenced := func() {
		n.m.fenced.Add(context.WithoutCancel(ctx), 1)
		stepDown()
	}
	// The term's store (its committer, its sequence blocks) ends with the
	// term, after the term's Host.
	defer func() {
		if err := store.Store.Close(); err != nil {
			log.Warn("close the term's catalog store", "err", err)
		}
	}()
	n.mu.Lock()
	n.term = &termState{term: term}
	n.notifyLocked()
	n.mu.Unlock()
	n.m.leading.Store(true)
	log.Info("elected leader: starting this term's components")
	started := time.Now()
	h, err := host.Open(ctx, n.cfg, host.Options{
		Version: n.opts.Version, Logger: log, Clock: n.opts.Clock,
		Catalog: store, Telemetry: n.tel, Embedded: true, Takeover: true,
		Term: uint64(term), NodeName: n.name, OnFenced: queueFenced,
	})
	if err == nil {
		if err = h.Start(ctx); err != nil {
			_ = h.Shutdown(context.WithoutCancel(ctx))
		}
	}
	if err != nil {
		n.endTerm(ctx, el, nil, log)
		return fmt.Errorf("term %d: start: %w", term, err)
	}
	n.mu.Lock()
	n.term.host = h
	n.notifyLocked()
	n.mu.Unlock()
	log.Info("leading", "start", time.Since(started).Round(time.Millisecond))
	reason := ""
	select {
	case <-ctx.Done():
		reason = "stopping"
	case <-sess.Done():
		reason = "etcd session lost"
		// The window every fence exists for: the term is over but this
		// replica has not noticed yet. Tests widen it here.
		failpoint.Hit("cluster.session-lost")
	case <-fenced:
		reason = "a commit or an append was fenced: a newer term exists"
	}
	log.Warn("stepping down", "reason", reason)
	n.endTerm(ctx, el, h, log)
	return nil
}

// endTerm stops serving the term, resigns (first: a successor can take
// over while this Host drains; the drained work's commits are fenced from
// the moment the key is gone), then shuts the term's Host down.
func (n *Node) endTerm(ctx context.Context, el *concurrency.Election, h *host.Host, log *slog.Logger) {
	n.mu.Lock()
	n.term = nil
	n.notifyLocked()
	n.mu.Unlock()
	n.m.leading.Store(false)
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	if err := el.Resign(rctx); err != nil {
		log.Warn("resign failed (the session's TTL ends the term instead)", "err", err)
	}
	cancel()
	if h != nil {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), n.cfg.API.ShutdownTimeout)
		if err := h.Shutdown(sctx); err != nil {
			log.Warn("term shutdown", "err", err)
		}
		cancel()
	}
}

func sleepCtx(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// countingStore counts fenced commits (hostd.cluster.fenced_commits).
type countingStore struct {
	catalog.Store
	m *metrics
}

func (s *countingStore) Commit(ctx context.Context, b *catalog.Batch) (catalog.Version, error) {
	v, err := s.Store.Commit(ctx, b)
	if errors.Is(err, catalog.ErrFenced) {
		s.m.fenced.Add(ctx, 1)
	}
	return v, err
}

// Limits passes the term store's limits on (the WAL and the broadcast
// engine size their rounds by them).
func (s *countingStore) Limits() catalog.Limits {
	if l, ok := s.Store.(catalog.Limiter); ok {
		return l.Limits()
	}
	return catalog.Limits{}
}

// Backup streams the catalog's backup when the store can (the admin
// route needs it).
func (s *countingStore) Backup(ctx context.Context, w io.Writer) (catalog.Version, error) {
	b, ok := s.Store.(catalog.Backuper)
	if !ok {
		return 0, fmt.Errorf("cluster: catalog %T cannot back up", s.Store)
	}
	return b.Backup(ctx, w)
}

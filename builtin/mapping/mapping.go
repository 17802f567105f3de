package mapping

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/trace"
	tracenoop "go.opentelemetry.io/otel/trace/noop"

	"github.com/hostd-dev/hostd/runtime/catalog"
	"github.com/hostd-dev/hostd/runtime/sched"
	"github.com/hostd-dev/hostd/runtime/wal"
)

var walErrOutOfRange = wal.ErrOutOfRange

// Broker is a configured broker.
type Broker struct {
	Name   string            `json:"name"`
	Labels map[string]string `json:"labels,omitempty"`
}

// Config configures Open.
type Config struct {
	// Store is the catalog (mapping records, groups, producer states).
	// Required.
	Store catalog.Store
	// WAL holds the physical queues in the catalog (the embedded WAL):
	// creates, seals and producer windows commit atomically with the
	// mapping records, and a broadcast's appends to several vchannels
	// are one commit. Exactly one of WAL and Log is required.
	WAL *wal.WAL
	// Log holds the physical queues on any wal.Log (in practice
	// runtime/wal/jswal on JetStream); it must implement wal.Sealer.
	// Only the queues' data moves there: the mapping records stay in
	// Store. See "Log mode" in doc.go for what is atomic then.
	Log wal.Log
	// Brokers are the candidate brokers. Default: one broker "local".
	Brokers []Broker
	// Policies adds named policies (plugin policies, adapted by host) to
	// the built-in "balanced".
	Policies map[string]Policy
	// LookupPolicy finds policies not in Policies (the host adapts plugin
	// policies of runtime/wasm to it, so plugins loaded later are found).
	LookupPolicy func(name string) (Policy, bool)
	// Pinned topics cannot be deleted (ErrReserved): the host pins the
	// topics behind the configured broadcast.vchannels, which broadcasts
	// would otherwise fail on until a restart recreated them.
	Pinned []string
	// ControlRetention is the control channel's retention. Default: none.
	ControlRetention Retention
	// RetentionInterval is how often Run applies retention. Default 1m.
	RetentionInterval time.Duration
	// HoldTimeout bounds how long appends to a queue being remapped wait
	// for the remap to commit. Default 2s.
	HoldTimeout time.Duration
	Clock       sched.Clock
	// MeterProvider, TracerProvider, Logger: defaults are no-ops.
	MeterProvider  metric.MeterProvider
	TracerProvider trace.TracerProvider
	Logger         *slog.Logger
}

func (c *Config) setDefaults() {
	if len(c.Brokers) == 0 {
		c.Brokers = []Broker{{Name: "local"}}
	}
	if c.RetentionInterval == 0 {
		c.RetentionInterval = time.Minute
	}
	if c.HoldTimeout == 0 {
		c.HoldTimeout = 2 * time.Second
	}
	if c.Clock == nil {
		c.Clock = sched.Real
	}
	if c.MeterProvider == nil {
		c.MeterProvider = metricnoop.NewMeterProvider()
	}
	if c.TracerProvider == nil {
		c.TracerProvider = tracenoop.NewTracerProvider()
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
}

// Validate reports every problem at once.
func (c Config) Validate() error {
	var errs []error
	if c.Store == nil {
		errs = append(errs, errors.New("mapping.store: required"))
	}
	switch {
	case c.WAL == nil && c.Log == nil:
		errs = append(errs, errors.New("mapping.wal: set one of WAL (the embedded WAL) and Log (e.g. JetStream): neither is set"))
	case c.WAL != nil && c.Log != nil:
		errs = append(errs, errors.New("mapping.wal: set one of WAL (the embedded WAL) and Log (e.g. JetStream), not both"))
	case c.Log != nil:
		if _, ok := c.Log.(wal.Sealer); !ok {
			errs = append(errs, fmt.Errorf("mapping.wal: the Log (%T) cannot seal queues (wal.Sealer), which remaps need", c.Log))
		}
	}
	seen := map[string]bool{}
	for i, b := range c.Brokers {
		if err := ValidateBrokerName(b.Name); err != nil {
			errs = append(errs, fmt.Errorf("mapping.brokers[%d]: %w", i, err))
		}
		if seen[b.Name] {
			errs = append(errs, fmt.Errorf("mapping.brokers[%d]: duplicate broker %q", i, b.Name))
		}
		seen[b.Name] = true
	}
	for name := range c.Policies {
		if name == BalancedName {
			errs = append(errs, fmt.Errorf("mapping.policies: %q is built in", name))
		}
	}
	if c.RetentionInterval < 0 || c.HoldTimeout < 0 {
		errs = append(errs, errors.New("mapping: retention_interval and hold_timeout must be >= 0"))
	}
	return errors.Join(errs...)
}

// Mapping is the static-topic service: it owns the mapping records, is the
// broadcast engine's wal.Resolver (vchannel "topic/N" → leader segment),
// and serves reads, offsets, consumer groups and retention.
type Mapping struct {
	cfg     Config
	store   catalog.Store
	w       *wal.WAL   // WAL mode (nil in Log mode)
	log     wal.Log    // Log mode (nil in WAL mode)
	sealer  wal.Sealer // log's
	brokers map[string]Broker
	tracer  trace.Tracer
	logger  *slog.Logger
	met     metrics

	mu sync.RWMutex
	// refreshMu serializes cache reloads (snapshot read + install), so a
	// reload that read an older snapshot can never overwrite a newer one.
	// Taken before mu.
	refreshMu sync.Mutex
	topics    map[string]*cached // a hint: validated by the WAL on every append
	holds     map[string]*hold   // vchannel → remap in progress

	prodMu sync.Mutex
	prods  map[string]*producer

	// pending are physical queues created on the Log for plans not yet
	// committed (Log mode): the orphan sweep leaves them alone until
	// orphanGrace after their creation. Guarded by mu.
	pending map[string]time.Time
}

type cached struct {
	t      *Topic
	queues []*LogicQueue
}

type hold struct {
	gen   uint64 // leader gen when the hold was taken
	until time.Time
	ch    chan struct{}
}

type metrics struct {
	ops      metric.Int64Counter
	appends  metric.Int64Counter
	reads    metric.Int64Counter
	moved    metric.Int64Counter
	trimmed  metric.Int64Counter
	dropped  metric.Int64Counter
	conflict metric.Int64Counter
}

// Open loads and checks every topic (an invariant violation is an error
// naming topic, queue and segment) and creates the control topic if absent.
func Open(ctx context.Context, cfg Config) (*Mapping, error) {
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	m := &Mapping{cfg: cfg, store: cfg.Store, w: cfg.WAL, log: cfg.Log, brokers: map[string]Broker{},
		topics: map[string]*cached{}, holds: map[string]*hold{}, prods: map[string]*producer{}, logger: cfg.Logger,
		pending: map[string]time.Time{}}
	if cfg.Log != nil {
		m.sealer = cfg.Log.(wal.Sealer) // checked by Validate
	}
	for _, b := range cfg.Brokers {
		m.brokers[b.Name] = b
	}
	m.tracer = cfg.TracerProvider.Tracer("github.com/hostd-dev/hostd/builtin/mapping")
	mt := cfg.MeterProvider.Meter("github.com/hostd-dev/hostd/builtin/mapping")
	m.met.ops, _ = mt.Int64Counter("hostd.mapping.operations", metric.WithDescription("mapping operations by kind and outcome"))
	m.met.appends, _ = mt.Int64Counter("hostd.mapping.appended", metric.WithDescription("records appended to logic queues"))
	m.met.reads, _ = mt.Int64Counter("hostd.mapping.read", metric.WithDescription("records read from logic queues"))
	m.met.moved, _ = mt.Int64Counter("hostd.mapping.moved_queues", metric.WithDescription("logic queues moved by remaps"))
	m.met.trimmed, _ = mt.Int64Counter("hostd.mapping.retention_trimmed", metric.WithDescription("entries removed by retention"))
	m.met.dropped, _ = mt.Int64Counter("hostd.mapping.segments_dropped", metric.WithDescription("closed segments dropped by retention"))
	m.met.conflict, _ = mt.Int64Counter("hostd.mapping.conflicts", metric.WithDescription("mapping commits retried after a conflict"))

	if err := m.loadAll(ctx); err != nil {
		return nil, err
	}
	if _, ok := m.topics[ControlTopic]; !ok {
		names := m.brokerNames()
		_, err := m.Apply(ctx, Change{Kind: KindCreate, Topic: ControlTopic, Queues: 1, Brokers: names[:1]})
		if err != nil && !errors.Is(err, ErrExists) {
			return nil, fmt.Errorf("mapping: create control topic: %w", err)
		}
	}
	return m, nil
}

func (m *Mapping) brokerNames() []string {
	out := make([]string, 0, len(m.brokers))
	for n := range m.brokers {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// Brokers returns the configured brokers sorted by name.
func (m *Mapping) Brokers() []Broker {
	out := make([]Broker, 0, len(m.brokers))
	for _, n := range m.brokerNames() {
		out = append(out, m.brokers[n])
	}
	return out
}

// loadAll loads every topic and checks the invariants across the catalog.
func (m *Mapping) loadAll(ctx context.Context) error {
	all := map[string]*cached{}
	err := m.store.View(ctx, func(r catalog.Reader) error {
		var names []string
		err := r.Scan([]byte(prefixTopic), []byte(catalog.NSMapping+"t0"), func(kv catalog.KV) error {
			names = append(names, string(kv.Key[len(prefixTopic):]))
			return nil
		})
		if err != nil {
			return err
		}
		used := map[string]string{}
		for _, n := range names {
			c, err := loadTopic(r, n, used)
			if err != nil {
				return err
			}
			all[n] = c
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("mapping: load: %w", err)
	}
	m.mu.Lock()
	m.topics = all
	m.mu.Unlock()
	return nil
}

// loadTopic reads a topic and its queues from r and checks invariants.
func loadTopic(r catalog.Reader, name string, used map[string]string) (*cached, error) {
	c, _, _, err := loadTopicVersions(r, name)
	if err != nil {
		return nil, err
	}
	if used == nil {
		used = map[string]string{}
	}
	if err := checkTopic(c.t, c.queues, used); err != nil {
		return nil, err
	}
	return c, nil
}

func loadTopicVersions(r catalog.Reader, name string) (*cached, catalog.Version, []catalog.Version, error) {
	v, ver, err := r.Get(topicKey(name))
	if errors.Is(err, catalog.ErrNotFound) {
		return nil, 0, nil, fmt.Errorf("%w: topic %q", ErrNotFound, name)
	}
	if err != nil {
		return nil, 0, nil, err
	}
	t, err := decodeTopic(topicKey(name), v)
	if err != nil {
		return nil, 0, nil, err
	}
	c := &cached{t: t, queues: make([]*LogicQueue, t.Queues)}
	vers := make([]catalog.Version, t.Queues)
	start, end := queueRange(name)
	err = r.Scan(start, end, func(kv catalog.KV) error {
		q, err := decodeQueue(kv.Key, kv.Value)
		if err != nil {
			return err
		}
		if q.ID < 0 || q.ID >= t.Queues {
			return &InvariantError{Topic: name, Queue: q.ID, Segment: -1, Reason: fmt.Sprintf("logic queue beyond the topic's %d queues", t.Queues)}
		}
		c.queues[q.ID] = q
		vers[q.ID] = kv.Version
		return nil
	})
	return c, ver, vers, err
}

// Refresh reloads topic from the catalog into the cache (after a change
// committed by the broadcast engine), wakes long-poll readers and releases
// appends held for a remap of its queues.
func (m *Mapping) Refresh(ctx context.Context, topic string) error {
	m.refreshMu.Lock()
	defer m.refreshMu.Unlock()
	return m.refreshLocked(ctx, topic)
}

func (m *Mapping) refreshLocked(ctx context.Context, topic string) error {
	var c *cached
	err := m.store.View(ctx, func(r catalog.Reader) error {
		var err error
		c, err = loadTopic(r, topic, nil)
		return err
	})
	m.mu.Lock()
	old := m.topics[topic]
	if errors.Is(err, ErrNotFound) {
		delete(m.topics, topic)
	} else if err == nil {
		m.topics[topic] = c
	}
	var changed []string
	if c != nil {
		for i, q := range c.queues {
			vc := VChannel(topic, i)
			if h := m.holds[vc]; h != nil && q.Leader().Gen != h.gen {
				close(h.ch)
				delete(m.holds, vc)
			}
			if old != nil && i < len(old.queues) && old.queues[i].Leader().Gen != q.Leader().Gen {
				for _, s := range old.queues[i].Segments {
					changed = append(changed, s.PhysicalQueue())
				}
			}
		}
	} else if old != nil {
		for _, q := range old.queues {
			changed = append(changed, q.Leader().PhysicalQueue())
		}
	}
	m.mu.Unlock()
	for _, pq := range changed {
		m.changed(pq)
	}
	if errors.Is(err, ErrNotFound) {
		return nil
	}
	return err
}

// refreshQueue reloads one logic queue's record into the cache (cheaper
// than Refresh on a large topic: appends that found their leader sealed,
// and appends held for a remap, use it). A missing topic or queue falls
// back to Refresh.
func (m *Mapping) refreshQueue(ctx context.Context, topic string, id int) error {
	m.refreshMu.Lock()
	defer m.refreshMu.Unlock()
	var q *LogicQueue
	err := m.store.View(ctx, func(r catalog.Reader) error {
		v, _, err := r.Get(queueKey(topic, id))
		if err != nil {
			return err
		}
		q, err = decodeQueue(queueKey(topic, id), v)
		return err
	})
	if errors.Is(err, catalog.ErrNotFound) {
		return m.refreshLocked(ctx, topic)
	}
	if err != nil {
		return err
	}
	if len(q.Segments) == 0 {
		return &InvariantError{Topic: topic, Queue: id, Segment: -1, Reason: "no segments"}
	}
	m.mu.Lock()
	c := m.topics[topic]
	if c == nil || id >= len(c.queues) {
		m.mu.Unlock()
		return m.refreshLocked(ctx, topic)
	}
	old := c.queues[id]
	nc := &cached{t: c.t, queues: append([]*LogicQueue(nil), c.queues...)}
	nc.queues[id] = q
	m.topics[topic] = nc
	vc := VChannel(topic, id)
	if h := m.holds[vc]; h != nil && q.Leader().Gen != h.gen {
		close(h.ch)
		delete(m.holds, vc)
	}
	m.mu.Unlock()
	if old.Leader().Gen != q.Leader().Gen {
		m.changed(old.Leader().PhysicalQueue())
	}
	return nil
}

// queueOf returns the cached logic queue, loading the topic on a miss.
func (m *Mapping) queueOf(ctx context.Context, topic string, id int) (*LogicQueue, error) {
	m.mu.RLock()
	c := m.topics[topic]
	m.mu.RUnlock()
	if c == nil || id >= len(c.queues) {
		if err := m.Refresh(ctx, topic); err != nil {
			return nil, err
		}
		m.mu.RLock()
		c = m.topics[topic]
		m.mu.RUnlock()
	}
	if c == nil || id < 0 || id >= len(c.queues) {
		return nil, fmt.Errorf("%w: %q", wal.ErrNoChannel, VChannel(topic, id))
	}
	return c.queues[id], nil
}

func (m *Mapping) span(ctx context.Context, op string, attrs ...attribute.KeyValue) (context.Context, func(*error)) {
	ctx, sp := m.tracer.Start(ctx, "mapping."+op, trace.WithAttributes(attrs...))
	return ctx, func(errp *error) {
		ok := errp == nil || *errp == nil
		if !ok {
			sp.RecordError(*errp)
			sp.SetStatus(codes.Error, (*errp).Error())
		}
		m.met.ops.Add(ctx, 1, metric.WithAttributes(attribute.String("op", op), attribute.Bool("ok", ok)))
		sp.End()
	}
}

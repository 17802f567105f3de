package locks

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/hostd-dev/hostd/runtime/sched"
)

// PresenceOptions configure a Presence table. The zero value is usable.
type PresenceOptions struct {
	// Clock; TTLs use its monotonic reading (see Monotonic). Default sched.Real.
	Clock sched.Clock
	// DefaultTTL applies when Announce gives none. Default 30s.
	DefaultTTL time.Duration
	// MaxTTL is the longest TTL accepted. Default 10m.
	MaxTTL time.Duration
	// SweepInterval is how often expired entries are dropped from memory
	// (reads never show them either way). Default 1s.
	SweepInterval  time.Duration
	TracerProvider trace.TracerProvider
	MeterProvider  metric.MeterProvider
}

// Presence is the "who is looking at / editing this" table (the CMDB
// cc_HostLock done right): many holders per key, each entry expires unless
// re-announced, an entry can only be refreshed or withdrawn with the token
// its first announce returned, and it never interacts with lease locks.
//
// Presence is in memory only: entries are heartbeats with short TTLs, and
// after a restart holders re-announce (their old token is then unknown, so
// the re-announce simply creates a new entry).
type Presence struct {
	opts   PresenceOptions
	base   time.Time
	tracer trace.Tracer
	ops    metric.Int64Counter

	mu      sync.Mutex
	entries map[string]map[string]*pentry // key -> holder -> entry
	n       int

	stop chan struct{}
	wg   sync.WaitGroup
}

type pentry struct {
	token     string
	meta      map[string]string
	since     time.Time
	expiresAt time.Time
	deadline  time.Duration
}

// PresenceEntry is one holder's announcement (no token).
type PresenceEntry struct {
	Key       string            `json:"key"`
	Holder    string            `json:"holder"`
	Meta      map[string]string `json:"meta,omitempty"`
	Since     time.Time         `json:"since"`
	ExpiresAt time.Time         `json:"expires_at"`
}

// NewPresence starts a presence table; Close stops its sweeper.
func NewPresence(opts PresenceOptions) *Presence {
	if opts.Clock == nil {
		opts.Clock = sched.Real
	}
	if opts.DefaultTTL <= 0 {
		opts.DefaultTTL = 30 * time.Second
	}
	if opts.MaxTTL <= 0 {
		opts.MaxTTL = 10 * time.Minute
	}
	if opts.SweepInterval <= 0 {
		opts.SweepInterval = time.Second
	}
	tp := opts.TracerProvider
	if tp == nil {
		tp = noop.NewTracerProvider()
	}
	mp := opts.MeterProvider
	if mp == nil {
		mp = metricnoop.NewMeterProvider()
	}
	p := &Presence{
		opts: opts, base: opts.Clock.Now(), tracer: tp.Tracer("github.com/hostd-dev/hostd/builtin/locks"),
		entries: map[string]map[string]*pentry{}, stop: make(chan struct{}),
	}
	m := mp.Meter("github.com/hostd-dev/hostd/builtin/locks")
	p.ops, _ = m.Int64Counter("hostd.presence.ops", metric.WithDescription("presence operations by result code"))
	_, _ = m.Int64ObservableGauge("hostd.presence.entries", metric.WithDescription("live presence entries"),
		metric.WithInt64Callback(func(_ context.Context, o metric.Int64Observer) error {
			o.Observe(int64(p.Len()))
			return nil
		}))
	p.wg.Add(1)
	go p.sweepLoop()
	return p
}

// Close stops the sweeper. Idempotent.
func (p *Presence) Close() {
	p.mu.Lock()
	select {
	case <-p.stop:
		p.mu.Unlock()
		return
	default:
	}
	close(p.stop)
	p.mu.Unlock()
	p.wg.Wait()
}

func (p *Presence) now() time.Duration {
	if m, ok := p.opts.Clock.(Monotonic); ok {
		return m.Monotonic()
	}
	return p.opts.Clock.Now().Sub(p.base)
}

func (p *Presence) span(ctx context.Context, op, key, holder string) (context.Context, func(error)) {
	ctx, sp := p.tracer.Start(ctx, "presence."+op, trace.WithAttributes(attribute.String("presence.key", key), attribute.String("presence.holder", holder)))
	return ctx, func(err error) {
		code := ErrorCode(err)
		if err != nil {
			sp.RecordError(err)
			sp.SetStatus(codes.Error, err.Error())
		}
		sp.End()
		p.ops.Add(ctx, 1, metric.WithAttributes(attribute.String("op", op), attribute.String("result", code)))
	}
}

func validPresenceKey(key string) error {
	if key == "" {
		return &InvalidKeyError{Index: -1, Reason: "empty presence key"}
	}
	if len(key) > 2*MaxKeyLen {
		return &InvalidKeyError{Index: -1, Reason: fmt.Sprintf("presence key longer than %d bytes", 2*MaxKeyLen)}
	}
	return nil
}

// Announce adds or refreshes holder's entry on key for ttl (0: default;
// otherwise MinTTL..MaxTTL, see CheckTTL).
// The first announce of a (key, holder) returns a new token; refreshing a
// live entry requires that token (else ErrNotHolder: someone else uses the
// holder name). Concurrent announces never create duplicates.
func (p *Presence) Announce(ctx context.Context, key, holder string, meta map[string]string, ttl time.Duration, token string) (PresenceEntry, string, error) {
	_, done := p.span(ctx, "announce", key, holder)
	e, tok, err := p.announce(key, holder, meta, ttl, token)
	done(err)
	return e, tok, err
}

func (p *Presence) announce(key, holder string, meta map[string]string, ttl time.Duration, token string) (PresenceEntry, string, error) {
	if err := validPresenceKey(key); err != nil {
		return PresenceEntry{}, "", err
	}
	if err := validateOwnerMeta(holder, meta); err != nil {
		return PresenceEntry{}, "", err
	}
	ttl, err := CheckTTL("ttl", ttl, p.opts.DefaultTTL, p.opts.MaxTTL)
	if err != nil {
		return PresenceEntry{}, "", err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	now, wall := p.now(), p.opts.Clock.Now()
	hs := p.entries[key]
	if hs == nil {
		hs = map[string]*pentry{}
		p.entries[key] = hs
	}
	e := hs[holder]
	if e != nil && e.deadline <= now {
		delete(hs, holder) // expired: a new announce starts over
		p.n--
		e = nil
	}
	if e == nil {
		e = &pentry{token: newToken(), since: wall}
		hs[holder] = e
		p.n++
	} else if e.token != token {
		return PresenceEntry{}, "", fmt.Errorf("%w: %q is announced on %q by someone else (wrong token)", ErrNotHolder, holder, key)
	}
	e.meta = cloneMeta(meta)
	e.deadline = now + ttl
	e.expiresAt = wall.Add(ttl)
	return PresenceEntry{Key: key, Holder: holder, Meta: cloneMeta(e.meta), Since: e.since, ExpiresAt: e.expiresAt}, e.token, nil
}

// Withdraw removes holder's own entry on key; token must be the one its
// announce returned (ErrNotHolder otherwise, changing nothing). Withdrawing
// an entry that is already gone is a no-op.
func (p *Presence) Withdraw(ctx context.Context, key, holder, token string) error {
	_, done := p.span(ctx, "withdraw", key, holder)
	err := p.withdraw(key, holder, token)
	done(err)
	return err
}

func (p *Presence) withdraw(key, holder, token string) error {
	if err := validPresenceKey(key); err != nil {
		return err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	hs := p.entries[key]
	e := hs[holder]
	if e == nil || e.deadline <= p.now() {
		return nil
	}
	if e.token != token {
		return fmt.Errorf("%w: wrong token for %q on %q", ErrNotHolder, holder, key)
	}
	delete(hs, holder)
	p.n--
	if len(hs) == 0 {
		delete(p.entries, key)
	}
	return nil
}

// Who lists the live entries on key, sorted by holder.
func (p *Presence) Who(ctx context.Context, key string) ([]PresenceEntry, error) {
	_, done := p.span(ctx, "who", key, "")
	if err := validPresenceKey(key); err != nil {
		done(err)
		return nil, err
	}
	p.mu.Lock()
	now := p.now()
	out := []PresenceEntry{}
	for h, e := range p.entries[key] {
		if e.deadline > now {
			out = append(out, PresenceEntry{Key: key, Holder: h, Meta: cloneMeta(e.meta), Since: e.since, ExpiresAt: e.expiresAt})
		}
	}
	p.mu.Unlock()
	sort.Slice(out, func(i, j int) bool { return out[i].Holder < out[j].Holder })
	done(nil)
	return out, nil
}

// Len returns the number of entries in memory (expired ones not yet swept
// included).
func (p *Presence) Len() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.n
}

// Sweep drops expired entries from memory now.
func (p *Presence) Sweep() {
	p.mu.Lock()
	defer p.mu.Unlock()
	now := p.now()
	for k, hs := range p.entries {
		for h, e := range hs {
			if e.deadline <= now {
				delete(hs, h)
				p.n--
			}
		}
		if len(hs) == 0 {
			delete(p.entries, k)
		}
	}
}

func (p *Presence) sweepLoop() {
	defer p.wg.Done()
	for {
		select {
		case <-p.stop:
			return
		case <-p.opts.Clock.After(p.opts.SweepInterval):
			p.Sweep()
		}
	}
}

package host

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"time"

	"github.com/hostd-dev/hostd/builtin/broadcast"
	"github.com/hostd-dev/hostd/builtin/mapping"
	"github.com/hostd-dev/hostd/host/api"
	"github.com/hostd-dev/hostd/runtime/catalog"
	"github.com/hostd-dev/hostd/runtime/wal"
	"github.com/hostd-dev/hostd/sdk/abi"
)

// openMapping opens the WAL and the static-topic mapping, makes the
// mapping the broadcast engine's resolver (h.resolver), registers the
// built-in topic.create|grow|remap|delete message types, the topic, group
// and channel routes, and the retention loop. Vchannels listed in
// broadcast.vchannels ("topic/N") are created as topics at open.
func openMapping(ctx context.Context, h *Host) error {
	cfg := h.Config().Mapping
	if h.wal == nil && h.js == nil {
		w, err := wal.Open(ctx, wal.Config{Store: h.Catalog(), Clock: h.Clock(),
			TracerProvider: h.TracerProvider(), MeterProvider: h.MeterProvider(),
			Logger: h.Logger().With("component", "wal")})
		if err != nil {
			return fmt.Errorf("open wal: %w", err)
		}
		h.wal = w
		h.AddComponent("wal", nil, func(context.Context) error { return w.Close() })
	}
	brokers := make([]mapping.Broker, len(cfg.Brokers))
	for i, b := range cfg.Brokers {
		brokers[i] = mapping.Broker{Name: b.Name, Labels: b.Labels}
	}
	m, err := mapping.Open(ctx, mapping.Config{
		Store: h.Catalog(), WAL: h.wal, Log: queueLog(h), Brokers: brokers, Pinned: vchannelTopics(h.Config().Broadcast.Vchannels),
		LookupPolicy: func(name string) (mapping.Policy, bool) {
			if h.plugins == nil || !h.plugins.HasPolicy(name) {
				return nil, false
			}
			return pluginPolicy{h: h, name: name}, true
		},
		ControlRetention:  mapping.Retention{MaxAge: cfg.ControlRetention.MaxAge, MaxBytes: uint64(cfg.ControlRetention.MaxBytes)},
		RetentionInterval: cfg.RetentionInterval,
		HoldTimeout:       cfg.HoldTimeout,
		Clock:             h.Clock(),
		TracerProvider:    h.TracerProvider(),
		MeterProvider:     h.MeterProvider(),
		Logger:            h.Logger().With("component", "mapping"),
	})
	if err != nil {
		return err
	}
	if moved, dropped, err := m.MigrateGroupOffsets(ctx); err != nil {
		return err
	} else if moved+dropped > 0 {
		h.Logger().Info("mapping: moved group offsets to the per-topic layout", "moved", moved, "dropped", dropped)
	}
	if err := ensureVChannelTopics(ctx, m, h.Config().Broadcast.Vchannels); err != nil {
		return err
	}
	h.mapping = m
	h.resolver = m.Resolver()
	for _, t := range mapping.MessageTypes {
		h.RegisterBroadcastType(t, topicHandler{m: m, store: h.Catalog()}, broadcast.TypeOptions{})
	}
	api.RegisterTopics(h.API(), topicService{h: h, m: m})
	api.RegisterGroups(h.API(), m)
	api.RegisterChannels(h.API(), channelService{m: m})

	runCtx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	h.AddComponent("mapping retention", func(context.Context) error {
		go func() {
			defer close(done)
			_ = m.Run(runCtx)
		}()
		return nil
	}, func(ctx context.Context) error {
		cancel()
		select {
		case <-done:
		case <-ctx.Done():
			return ctx.Err()
		}
		return nil
	})
	return nil
}

// Resolver returns the vchannel resolver: the mapping once host/mapping.go
// opened it, else the 1:1 resolver (nil before Open).
func (h *Host) Resolver() wal.Resolver { return h.resolver }

// Mapping returns the static-topic service (nil when not wired).
func (h *Host) Mapping() *mapping.Mapping { return h.mapping }

// ensureVChannelTopics creates (or grows) the topics of configured
// vchannels "topic/N" so that they exist for broadcasts.
// vchannelTopics returns the topics behind vcs (malformed names are left
// to ensureVChannelTopics to report).
func vchannelTopics(vcs []string) []string {
	var out []string
	for _, vc := range vcs {
		if t, _, err := mapping.ParseVChannel(vc); err == nil && !slices.Contains(out, t) {
			out = append(out, t)
		}
	}
	return out
}

func ensureVChannelTopics(ctx context.Context, m *mapping.Mapping, vcs []string) error {
	need := map[string]int{}
	for _, vc := range vcs {
		t, n, err := mapping.ParseVChannel(vc)
		if err != nil {
			return fmt.Errorf("broadcast.vchannels: %w", err)
		}
		if t == mapping.ControlTopic {
			continue
		}
		need[t] = max(need[t], n+1)
	}
	names := make([]string, 0, len(need))
	for t := range need {
		names = append(names, t)
	}
	sort.Strings(names)
	for _, t := range names {
		ti, err := m.Describe(ctx, t)
		switch {
		case errors.Is(err, mapping.ErrNotFound):
			_, err = m.Apply(ctx, mapping.Change{Kind: mapping.KindCreate, Topic: t, Queues: need[t]})
		case err == nil && ti.Topic.Queues < need[t]:
			_, err = m.Apply(ctx, mapping.Change{Kind: mapping.KindGrow, Topic: t, Queues: need[t]})
		}
		if err != nil {
			return fmt.Errorf("broadcast.vchannels: topic %q: %w", t, err)
		}
	}
	return nil
}

// topicHandler serves the built-in topic.* message types for the broadcast
// engine: the change's plan is the ack callback's result, committed with
// the task's TOMBSTONE.
type topicHandler struct {
	m     *mapping.Mapping
	store catalog.Store
}

func (t topicHandler) ResourceKeys(_ context.Context, msg *broadcast.Message) ([]abi.ResourceKey, error) {
	c, err := mapping.DecodeChange(msg.Type, msg.Payload)
	if err != nil {
		return nil, err
	}
	return mapping.ResourceKeys(c), nil
}

func (t topicHandler) Validate(ctx context.Context, msg *broadcast.Message, kv catalog.Reader) error {
	c, err := mapping.DecodeChange(msg.Type, msg.Payload)
	if err != nil {
		return err
	}
	return t.m.Validate(ctx, kv, c)
}

func (t topicHandler) Ack(ctx context.Context, call *broadcast.AckCall) (broadcast.AckResult, error) {
	c, err := mapping.DecodeChange(call.Message.Type, call.Message.Payload)
	if err != nil {
		return broadcast.AckResult{}, broadcast.Permanent(err)
	}
	var p *mapping.Plan
	err = t.store.View(ctx, func(r catalog.Reader) error {
		var err error
		p, err = t.m.PlanChange(ctx, r, c)
		return err
	})
	if err != nil {
		if permanentMappingError(err) {
			return broadcast.AckResult{}, broadcast.Permanent(err)
		}
		return broadcast.AckResult{}, err
	}
	if p.NoChange {
		return broadcast.AckResult{}, nil
	}
	return broadcast.AckResult{Checks: p.Checks, RangeChecks: p.RangeChecks, Ops: p.Ops}, nil
}

func permanentMappingError(err error) bool {
	for _, e := range []error{mapping.ErrExists, mapping.ErrNotFound, mapping.ErrShrink, mapping.ErrUnknownBroker,
		mapping.ErrUnknownPolicy, mapping.ErrPolicy, mapping.ErrReserved, mapping.ErrInvalid, mapping.ErrInvariant} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

// topicService runs topic changes as broadcasts (api.TopicService).
type topicService struct {
	h *Host
	m *mapping.Mapping
}

func (s topicService) Change(ctx context.Context, c mapping.Change, dryRun bool) (*api.TopicChange, error) {
	var p *mapping.Plan
	err := s.h.Catalog().View(ctx, func(r catalog.Reader) error {
		var err error
		p, err = s.m.DryRun(ctx, r, c)
		return err
	})
	if err != nil {
		return nil, err
	}
	out := &api.TopicChange{Kind: c.Kind, Topic: c.Topic, DryRun: dryRun, NoChange: p.NoChange, Epoch: p.Epoch, Moved: p.Moved}
	if dryRun {
		return out, nil
	}
	e := s.h.Broadcast()
	if e == nil {
		return nil, api.Unavailable("the broadcast engine is not running")
	}
	typ, payload := c.Encode()
	// The remap targets the control channel and every moved logic queue
	// (consumers see the remap message as a marker before the switch).
	vcs := []string{mapping.VChannel(mapping.ControlTopic, 0)}
	if c.Kind == mapping.KindRemap {
		for _, q := range p.Moved {
			vcs = append(vcs, mapping.VChannel(c.Topic, q))
		}
	}
	res, err := e.Submit(ctx, &broadcast.Request{Message: broadcast.Message{Type: typ, Payload: payload},
		VChannels: vcs, Wait: broadcast.WaitDone})
	if err != nil {
		var rej *broadcast.RejectedError
		if errors.As(err, &rej) && rej.Err != nil {
			return nil, rej.Err
		}
		return nil, err
	}
	out.BroadcastID = res.ID
	if res.State == broadcast.StateFailed {
		return nil, api.FailedPrecondition("topic %s %q failed: %s", c.Kind, c.Topic, res.Error).With("broadcast_id", res.ID)
	}
	if err := s.m.Refresh(ctx, c.Topic); err != nil {
		return nil, err
	}
	if c.Kind == mapping.KindDelete {
		s.m.Committed(ctx, p)
		return out, nil
	}
	out.Info, err = s.m.Describe(ctx, c.Topic)
	if out.Info != nil {
		out.Epoch = out.Info.Topic.Epoch
	}
	return out, err
}

func (s topicService) Describe(ctx context.Context, topic string) (*mapping.TopicInfo, error) {
	return s.m.Describe(ctx, topic)
}

func (s topicService) List(ctx context.Context, after string, limit int) ([]mapping.Topic, bool, error) {
	return s.m.List(ctx, after, limit)
}

func (s topicService) Bounds(ctx context.Context, vc string) (uint64, uint64, error) {
	return s.m.Bounds(ctx, vc)
}

func (s topicService) OffsetForTime(ctx context.Context, vc string, at time.Time) (uint64, error) {
	return s.m.OffsetForTime(ctx, vc, at)
}

func (s topicService) TranslateLogic(ctx context.Context, vc string, off uint64) (*mapping.Translation, error) {
	return s.m.TranslateLogic(ctx, vc, off)
}

func (s topicService) TranslatePhysical(ctx context.Context, broker string, id, off uint64) (*mapping.Translation, error) {
	return s.m.TranslatePhysical(ctx, broker, id, off)
}

// channelService adapts the mapping to api.ChannelService.
type channelService struct{ m *mapping.Mapping }

func (c channelService) Read(ctx context.Context, vc string, from uint64, limit int) ([]wal.Message, error) {
	return c.m.Read(ctx, vc, from, limit)
}

func (c channelService) Bounds(ctx context.Context, vc string) (uint64, uint64, error) {
	return c.m.Bounds(ctx, vc)
}

func (c channelService) Wait(ctx context.Context, vc string, offset uint64) error {
	return c.m.Wait(ctx, vc, offset)
}

func (c channelService) Append(ctx context.Context, vc string, recs []wal.Record, producer string, seq uint64) ([]wal.Position, bool, error) {
	return c.m.AppendOpts(ctx, vc, recs, mapping.AppendOptions{ProducerID: producer, Seq: seq})
}

// pluginPolicy runs a plugin's mapping policy through runtime/wasm.
type pluginPolicy struct {
	h    *Host
	name string
}

// Source names the policy and the plugin serving it, so mapping's errors
// about the policy's output point at the plugin to fix.
func (p pluginPolicy) Source() string {
	if plugin, ok := p.h.plugins.PolicyPlugin(p.name); ok {
		return fmt.Sprintf("policy %s of plugin %s", p.name, plugin)
	}
	return "plugin policy " + p.name
}

func (p pluginPolicy) Assign(ctx context.Context, in mapping.PolicyInput) ([]string, error) {
	ai := &abi.PolicyInput{Operation: string(in.Operation), Topic: in.Topic, Queues: uint32(in.TotalQueues)}
	for q, b := range in.Current {
		if b != "" {
			ai.Current = append(ai.Current, abi.Assignment{Queue: uint32(q), Broker: b})
		}
	}
	for _, b := range in.Brokers {
		ai.Brokers = append(ai.Brokers, abi.Broker{Name: b.Name, Load: uint32(b.Load), Labels: b.Labels})
	}
	out, err := p.h.plugins.Policy(ctx, p.name, ai)
	if err != nil {
		return nil, err
	}
	res := make([]string, in.TotalQueues)
	for _, a := range out.Assignments {
		if int(a.Queue) >= in.TotalQueues {
			return nil, fmt.Errorf("assigned queue %d of a topic with %d queues", a.Queue, in.TotalQueues)
		}
		if res[a.Queue] != "" {
			return nil, fmt.Errorf("assigned queue %d twice", a.Queue)
		}
		res[a.Queue] = a.Broker
	}
	for q, b := range res {
		if b == "" {
			return nil, fmt.Errorf("left queue %d unassigned", q)
		}
	}
	return res, nil
}

package host

import (
	"context"
	"errors"
	"fmt"

	"github.com/hostd-dev/hostd/builtin/broadcast"
	"github.com/hostd-dev/hostd/builtin/locks"
	"github.com/hostd-dev/hostd/builtin/mapping"
	"github.com/hostd-dev/hostd/host/api"
	"github.com/hostd-dev/hostd/runtime/catalog"
	"github.com/hostd-dev/hostd/runtime/wal"
	"github.com/hostd-dev/hostd/runtime/wasm"
	"github.com/hostd-dev/hostd/sdk/abi"
)

// openBroadcast builds the broadcast engine: the catalog, an in-process
// resource-key locker (builtin/locks), the vchannels (the mapping's
// resolver when host/mapping.go set h.resolver, else the 1:1 resolver over
// the WAL) and the plugins (runtime/wasm, when host/plugins.go set
// h.plugins). Recovery runs in the component's start, behind the
// "broadcast recovery" ready gate.
func openBroadcast(ctx context.Context, h *Host) error {
	cfg := h.Config().Broadcast
	if h.resolver == nil {
		if h.wal == nil {
			w, err := wal.Open(ctx, wal.Config{Store: h.Catalog(), Clock: h.Clock(),
				Queues:         cfg.Vchannels,
				TracerProvider: h.TracerProvider(), MeterProvider: h.MeterProvider(),
				Logger: h.Logger().With("component", "wal")})
			if err != nil {
				return fmt.Errorf("open wal: %w", err)
			}
			h.wal = w
			h.AddComponent("wal", nil, func(context.Context) error { return w.Close() })
		}
		d, err := wal.NewDirect(ctx, h.wal)
		if err != nil {
			return err
		}
		h.resolver = d
	}
	kl := locks.NewKeyLocker(locks.KeyLockerOptions{Clock: h.Clock(), MeterProvider: h.MeterProvider(), Name: "broadcast"})
	var plugins broadcast.HandlerSource
	if h.plugins != nil {
		plugins = pluginHandlers{rt: h.plugins, maxAttempts: cfg.MaxAttempts}
	}
	e, err := broadcast.New(broadcast.Options{
		Store:          h.Catalog(),
		Locker:         keyLocker{kl},
		Channels:       broadcast.ResolverChannels{R: h.resolver, Markers: markerTypes()},
		Handlers:       plugins,
		AllowUnhandled: cfg.AllowUnhandledTypes,
		MaxKeyLen:      cfg.MaxKeyLength,
		MaxPayload:     int(cfg.MaxPayload),
		MaxLifetime:    cfg.Tombstones.MaxLifetime,
		MaxCount:       cfg.Tombstones.MaxCount,
		CheckInterval:  cfg.Tombstones.CheckInterval,
		Clock:          h.Clock(),
		TracerProvider: h.TracerProvider(),
		MeterProvider:  h.MeterProvider(),
		Logger:         h.Logger(),
		AppendBatch:    appendBatchFor(h),
		MaxVChannels:   maxVChannelsFor(h.Catalog()),
	})
	if err != nil {
		return err
	}
	if err := e.Register(broadcast.NoopType, broadcast.Noop{}, broadcast.TypeOptions{MaxAttempts: cfg.MaxAttempts}); err != nil {
		return err
	}
	for _, b := range h.broadcastTypes {
		if err := e.Register(b.name, b.handler, b.opts); err != nil {
			return err
		}
	}
	h.broadcast = e
	api.RegisterBroadcasts(h.API(), e, h.messageRole)
	ready := h.ReadyGate("broadcast recovery")
	h.AddComponent("broadcast", func(ctx context.Context) error {
		// Recovered tasks need their plugins' handlers: wait for the
		// first plugin load (bounded by plugins.init_timeout per plugin).
		if h.pluginsLoaded != nil {
			select {
			case <-h.pluginsLoaded:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		if err := e.Start(ctx); err != nil {
			return err
		}
		ready()
		return nil
	}, func(context.Context) error {
		err := e.Close()
		kl.Close()
		return err
	})
	return nil
}

// messageRole is the role a token needs to broadcast msgType: fixed for
// the built-in types (api.BuiltinMessageRoles), declared at registration
// by a plugin's types, write for any other (an unknown type is then
// refused by the engine).
func (h *Host) messageRole(msgType string) api.Role {
	if r, ok := builtinRoles[msgType]; ok {
		return r
	}
	if h.plugins != nil {
		if hs, ok := h.plugins.Lookup(msgType); ok && hs.Role == abi.RoleAdmin {
			return api.RoleAdmin
		}
	}
	return api.RoleWrite
}

var builtinRoles = api.BuiltinMessageRoles()

// RegisterBroadcastType adds a built-in message type to the engine (call
// it from an opener that runs before openBroadcast, e.g. the mapping's
// topic.create/grow/remap/delete).
func (h *Host) RegisterBroadcastType(name string, handler broadcast.Handler, opts broadcast.TypeOptions) {
	h.broadcastTypes = append(h.broadcastTypes, broadcastType{name, handler, opts})
}

type broadcastType struct {
	name    string
	handler broadcast.Handler
	opts    broadcast.TypeOptions
}

// Broadcast is the broadcast engine (nil before Open finished).
func (h *Host) Broadcast() *broadcast.Engine { return h.broadcast }

// keyLocker adapts builtin/locks to broadcast.Locker.
type keyLocker struct{ l *locks.KeyLocker }

func (k keyLocker) Lock(ctx context.Context, keys []abi.ResourceKey) (broadcast.Guard, error) {
	g, err := k.l.Lock(ctx, "broadcast", keys)
	if err != nil {
		return nil, err
	}
	return lockGuard{g}, nil
}

func (k keyLocker) TryLock(keys []abi.ResourceKey) (broadcast.Guard, error) {
	g, err := k.l.TryLock("broadcast", keys)
	if err != nil {
		return nil, err
	}
	return lockGuard{g}, nil
}

type lockGuard struct{ g *locks.Guard }

func (g lockGuard) Release() { g.g.Unlock() }

// pluginHandlers adapts runtime/wasm to broadcast.HandlerSource.
type pluginHandlers struct {
	rt          *wasm.Runtime
	maxAttempts int
}

func (p pluginHandlers) Lookup(msgType string) (broadcast.Handler, broadcast.TypeOptions, bool) {
	hs, ok := p.rt.Lookup(msgType)
	if !ok {
		return nil, broadcast.TypeOptions{}, false
	}
	return pluginHandler{rt: p.rt, hs: hs}, broadcast.TypeOptions{MaxAttempts: p.maxAttempts}, true
}

type pluginHandler struct {
	rt *wasm.Runtime
	hs wasm.Handlers
}

func envelope(m *broadcast.Message) *abi.Message {
	return &abi.Message{Type: m.Type, Payload: m.Payload, Properties: m.Properties}
}

func (p pluginHandler) ResourceKeys(ctx context.Context, m *broadcast.Message) ([]abi.ResourceKey, error) {
	if !p.hs.ResourceKeys {
		return nil, nil
	}
	return p.rt.ResourceKeys(ctx, envelope(m))
}

func (p pluginHandler) Validate(ctx context.Context, m *broadcast.Message, kv catalog.Reader) error {
	if !p.hs.Validate {
		return nil
	}
	return p.rt.Validate(ctx, envelope(m), kv)
}

func (p pluginHandler) Ack(ctx context.Context, c *broadcast.AckCall) (broadcast.AckResult, error) {
	if !p.hs.Ack {
		return broadcast.AckResult{}, nil
	}
	env := envelope(&c.Message)
	env.ID, env.Attempt, env.TraceParent = c.BroadcastID, uint32(c.Attempt), c.TraceParent
	for _, cp := range c.Appends {
		env.VChannels = append(env.VChannels, abi.VChannel{Name: cp.VChannel, Appended: true,
			LogicOffset: cp.Offset, PhysicalQueue: cp.PhysicalQueue, TimeTick: cp.TimeTick})
	}
	res, err := p.rt.Ack(ctx, env)
	if err != nil {
		if wasm.IsPermanent(err) {
			return broadcast.AckResult{}, broadcast.Permanent(err)
		}
		return broadcast.AckResult{}, err
	}
	if res == nil {
		return broadcast.AckResult{}, errors.New("host: plugin returned no ack result")
	}
	return broadcast.AckResult{Checks: res.Checks, RangeChecks: res.RangeChecks, Ops: res.Ops}, nil
}

// markerTypes are the broadcast message types written as markers
// (wal.KindMarker) into the logic queues they target: the mapping's remap.
func markerTypes() map[string]bool {
	m := make(map[string]bool, len(mapping.MarkerTypes))
	for t := range mapping.MarkerTypes {
		m[t] = true
	}
	return m
}

// Engine bounds derived from the catalog's op limit per commit (etcd:
// --max-txn-ops, 128; Badger: tens of thousands). 0 keeps the engine's
// default, which is what a roomy catalog gets.
//
// appendBatchFor bounds the entries of one append round so that a round to
// as many vchannels fits one commit (a record put, a queue meta put and a
// version check each): 40 on etcd. With the queues on JetStream a round's
// records are not in any catalog commit (its tasks' records are committed
// as separate writers, which the committer splits to fit), so the round
// keeps the engine's default: 40 entries per round capped a cluster at
// about 400 broadcasts/s to 4 vchannels (bench/cluster TestReportJetStream).
func appendBatchFor(h *Host) int {
	if h.js != nil {
		return 0
	}
	return opsBound(h.Catalog(), 3, broadcast.DefaultAppendBatch)
}

// maxVChannelsFor bounds the vchannels of one broadcast so that the
// engine's own per-vchannel records of a task (checkpoints, acks) and room
// for its callback's KV writes fit one commit: 59 on etcd.
func maxVChannelsFor(store catalog.Store) int {
	return opsBound(store, 2, broadcast.DefaultMaxVChannels)
}

// opsBound is (ops per commit - 8) / per, or 0 when that is not below def
// or the store cannot tell its limits.
func opsBound(store catalog.Store, per int64, def int) int {
	l, ok := store.(catalog.Limiter)
	if !ok {
		return 0
	}
	mo := l.Limits().MaxBatchOps
	if mo <= 0 {
		return 0
	}
	if n := int(max(1, (mo-8)/per)); n < def {
		return n
	}
	return 0
}

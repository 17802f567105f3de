package host

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/hostd-dev/hostd/builtin/broadcast"
	"github.com/hostd-dev/hostd/builtin/locks"
	"github.com/hostd-dev/hostd/host/api"
	"github.com/hostd-dev/hostd/host/config"
	"github.com/hostd-dev/hostd/runtime/catalog"
	"github.com/hostd-dev/hostd/runtime/wasm"
	"github.com/hostd-dev/hostd/sdk/abi"
)

// wasmConfig is the part of the plugin runtime's config that comes from
// the config file: directory, compilation cache, limits, the plugin list.
// The default directory and the cache directory are created.
func wasmConfig(c *config.Config) (wasm.Config, error) {
	pc, data := c.Plugins, c.Data
	cfg := wasm.Config{
		Dir: pc.Dir,
		Defaults: wasm.Limits{
			CallTimeout: pc.CallTimeout,
			InitTimeout: pc.InitTimeout,
			MemoryLimit: uint64(pc.MemoryLimit),
			PoolSize:    pc.PoolSize,
			KVMaxKeys:   pc.KVMaxKeys,
			KVMaxBytes:  int64(pc.KVMaxBytes),
		},
	}
	if !data.InMemory {
		if cfg.Dir == "" {
			// The default directory is created, so operators can drop
			// plugins into it.
			cfg.Dir = filepath.Join(data.Dir, "plugins")
			if err := os.MkdirAll(cfg.Dir, 0o755); err != nil {
				return cfg, err
			}
		}
		cfg.CacheDir = filepath.Join(data.Dir, "wasm-cache")
		if err := os.MkdirAll(cfg.CacheDir, 0o755); err != nil {
			return cfg, err
		}
	}
	for _, p := range pc.List {
		cfg.Plugins = append(cfg.Plugins, wasm.Spec{Name: p.Name, Path: p.Path, Config: p.Config, Limits: wasm.Limits{
			CallTimeout: p.CallTimeout, MemoryLimit: uint64(p.MemoryLimit), PoolSize: p.PoolSize,
			KVMaxKeys: p.KVMaxKeys, KVMaxBytes: int64(p.KVMaxBytes), Interrupt: p.Interrupt,
		}})
	}
	return cfg, nil
}

// PrecompilePlugins compiles the plugins c names into c's compilation
// cache (data.dir/wasm-cache) without starting them. A cluster follower
// runs it at start, so that the term it may lead later starts its plugins
// from the cache instead of the compiler (seconds per plugin).
func PrecompilePlugins(ctx context.Context, c *config.Config, store catalog.Store) error {
	cfg, err := wasmConfig(c)
	if err != nil {
		return err
	}
	cfg.Store = store
	rt, err := wasm.Open(cfg)
	if err != nil {
		return err
	}
	defer rt.Close()
	return rt.Precompile(ctx)
}

// openPlugins builds the Wasm plugin runtime from plugins.*: plugins from
// plugins.dir (default <data.dir>/plugins) and plugins.list, the
// compilation cache in <data.dir>/wasm-cache, plugin KV in the catalog.
//
// The plugins load in the background once the component starts (the API
// is serving by then), behind the "plugins" ready gate; each instance's
// start is bounded by plugins.init_timeout. h.pluginsLoaded is closed when
// that first load is over; the broadcast engine (opened later, which finds
// its handlers through h.plugins) waits for it before recovering tasks. A
// plugin that fails to load is logged and shown by `hostd plugin ls`; it
// does not stop hostd. SIGHUP reloads the plugins, like
// POST /v1/plugins/reload.
func openPlugins(ctx context.Context, h *Host) error {
	cfg, err := wasmConfig(h.Config())
	if err != nil {
		return err
	}
	cfg.Store = h.Catalog()
	cfg.Clock = h.Clock()
	cfg.Logger = h.Logger().With("component", "plugins")
	cfg.TracerProvider = h.TracerProvider()
	cfg.MeterProvider = h.MeterProvider()
	cfg.InUse = h.pluginTypeInUse
	if h.leases != nil {
		cfg.Locks = pluginLocks{h.leases}
	}
	rt, err := wasm.Open(cfg)
	if err != nil {
		return err
	}
	h.plugins = rt
	loaded := make(chan struct{})
	h.pluginsLoaded = loaded
	ready := h.ReadyGate("plugins")
	loadCtx, cancelLoad := context.WithCancel(context.Background())
	api.RegisterPlugins(h.API(), rt)
	api.RegisterPluginKVWrites(h.API(), &pluginKVWriter{rt: rt, leases: h.leases,
		log: h.Logger().With("component", "plugins")})

	stop := make(chan struct{})
	done := make(chan struct{})
	h.AddComponent("plugins", func(ctx context.Context) error {
		stopLoad := context.AfterFunc(ctx, cancelLoad) // Start's context ending stops the load
		hup := make(chan os.Signal, 1)
		signal.Notify(hup, syscall.SIGHUP)
		go func() {
			defer close(done)
			defer signal.Stop(hup)
			start := time.Now()
			err := rt.Reload(loadCtx)
			stopLoad()
			if err != nil {
				// Already logged per plugin by the runtime; hostd runs
				// without them.
				h.Logger().Warn("some plugins failed to load; see `hostd plugin ls`", "component", "plugins", "err", err)
			}
			h.Logger().Info("plugins loaded", "component", "plugins", "plugins", len(rt.List()), "took", time.Since(start))
			ready()
			close(loaded)
			for {
				select {
				case <-hup:
					h.Logger().Info("SIGHUP: reloading plugins", "component", "plugins")
					if err := rt.Reload(context.Background()); err != nil {
						h.Logger().Error("plugin reload", "component", "plugins", "err", err)
					}
				case <-stop:
					return
				}
			}
		}()
		return nil
	}, func(context.Context) error {
		cancelLoad() // an initial load still running ends at once
		select {
		case <-stop:
		default:
			close(stop)
			<-done
		}
		// Components stop in reverse order: the broadcast engine (opened
		// after plugins) has stopped calling plugins by now.
		return rt.Close()
	})
	return nil
}

// pluginTypeInUse reports whether a broadcast that still needs msgType's
// handlers exists (PENDING, or FAILED and retryable by an admin).
func (h *Host) pluginTypeInUse(msgType string) bool {
	if h.broadcast == nil {
		return false
	}
	for _, st := range []broadcast.State{broadcast.StatePending, broadcast.StateFailed} {
		if ts, _ := h.broadcast.List(broadcast.Filter{State: st, Type: msgType, Limit: 1}); len(ts) > 0 {
			return true
		}
	}
	return false
}

// pluginLocks serves the plugins' lease-lock host functions from the
// lease service (opened before plugins): acquires never wait, the holder's
// meta names the plugin, and errors wrap runtime/wasm's sentinels so
// guests get stable statuses. Every call runs as the plugin's principal
// (locks.PluginPrincipal): a plugin only ever gets back, renews, releases
// or uses the fence of grants it took itself.
type pluginLocks struct{ s *locks.Service }

func (p pluginLocks) Acquire(ctx context.Context, r wasm.LeaseRequest) (abi.Lease, error) {
	g, err := p.s.Acquire(ctx, locks.AcquireRequest{Keys: r.Keys, TTL: r.TTL, Owner: r.Owner,
		Meta: map[string]string{"plugin": r.Plugin}, IdempotencyKey: r.IdempotencyKey,
		Principal: locks.PluginPrincipal(r.Plugin)})
	if err != nil {
		return abi.Lease{}, lockErr(err)
	}
	return leaseOf(g), nil
}

func (p pluginLocks) Renew(ctx context.Context, plugin, id, token string, ttl time.Duration) (abi.Lease, error) {
	g, err := p.s.RenewAs(ctx, locks.PluginPrincipal(plugin), id, token, ttl)
	if err != nil {
		return abi.Lease{}, lockErr(err)
	}
	return leaseOf(g), nil
}

func (p pluginLocks) Release(ctx context.Context, plugin, id, token string) error {
	return lockErr(p.s.ReleaseAs(ctx, locks.PluginPrincipal(plugin), id, token))
}

func (p pluginLocks) CheckFence(plugin string, key abi.ResourceKey, fence uint64) error {
	return lockErr(p.s.CheckFenceAs(locks.PluginPrincipal(plugin), key, fence))
}

func (p pluginLocks) FenceCheck(plugin string, key abi.ResourceKey, fence uint64) (catalog.Check, error) {
	c, err := p.s.FenceCheckAs(locks.PluginPrincipal(plugin), key, fence)
	return c, lockErr(err)
}

func leaseOf(g *locks.Grant) abi.Lease {
	l := abi.Lease{ID: g.ID, Token: g.Token, TTLMillis: uint64(g.TTL / time.Millisecond), ExpiresAt: g.ExpiresAt.UnixNano()}
	for _, k := range g.Keys {
		l.Keys = append(l.Keys, abi.FencedKey{Key: k, Fence: g.Fence})
	}
	return l
}

// lockErr maps the lease service's errors onto runtime/wasm's.
func lockErr(err error) error {
	var sentinel error
	switch locks.ErrorCode(err) {
	case "ok":
		return nil
	case "locked":
		sentinel = wasm.ErrLocked
	case "not_holder", "not_found":
		sentinel = wasm.ErrNotHolder
	case "expired":
		sentinel = wasm.ErrExpired
	case "invalid_key":
		sentinel = wasm.ErrInvalidKey
	case "ttl_too_long", "invalid_argument", "conflict":
		// conflict: the plugin reused its idempotency key for a
		// different request.
		sentinel = wasm.ErrInvalidLockArg
	default:
		return err
	}
	return &pluginLockError{sentinel, err}
}

// pluginLockError keeps the service's message (it names the key and the
// conflicting holders) and matches both its error and wasm's sentinel.
type pluginLockError struct{ sentinel, err error }

func (e *pluginLockError) Error() string   { return e.err.Error() }
func (e *pluginLockError) Unwrap() []error { return []error{e.sentinel, e.err} }

// pluginKVWriter commits the API's plugin KV writes (operators' overrides
// and lease holders' fenced writes). A fenced write carries the lease
// service's FenceCheck in its catalog batch, exactly as a plugin's
// kv_put_fenced carries it in its callback's result: the commit fails with
// catalog.ErrConflict if the grant's record changed after the check (a
// release, expiry or eviction deletes it). The write is then retried from
// a fresh FenceCheck, which reports the stale fence (not_holder, nothing
// written) — or, should the record have changed while the grant stayed
// current, writes again.
//
// The write is not held to the plugin's KV quota (an operator's or lease
// holder's write is not the plugin's), but it keeps the plugin's usage
// record exact (runtime/wasm KVWrite), so it may also conflict with a
// plugin callback's commit: it is then retried the same way.
type pluginKVWriter struct {
	rt     *wasm.Runtime
	leases *locks.Service // nil: fenced writes are unavailable
	log    *slog.Logger
	// beforeCommit, if set, runs between the fence check and the commit
	// (tests: evict the grant in that window).
	beforeCommit func()
}

// kvWriteAttempts bounds the retries of a write whose grant record or
// usage record keeps changing (renewals, concurrent writers).
const kvWriteAttempts = 5

func (p *pluginKVWriter) KVWrite(ctx context.Context, w api.KVWrite) (catalog.Version, error) {
	var err error
	for attempt := 0; attempt < kvWriteAttempts; attempt++ {
		var checks []catalog.Check
		if w.Fence != nil {
			if p.leases == nil {
				return 0, api.Unavailable("lease locks are not enabled, so a write cannot be fenced")
			}
			// Only a fence of a grant the caller's principal took: a
			// fence is not a secret, so anyone could present one.
			principal := w.Principal
			if principal == "" {
				principal = locks.PrincipalAnonymous
			}
			chk, err := p.leases.FenceCheckAs(principal, w.Fence.Key, w.Fence.Fence)
			if err != nil {
				return 0, err
			}
			checks = []catalog.Check{chk}
		}
		if p.beforeCommit != nil {
			p.beforeCommit()
		}
		var ver catalog.Version
		ver, err = p.rt.KVWrite(ctx, w.Plugin, w.Key, w.Value, w.Delete, checks...)
		if err == nil {
			p.logWrite(w)
			return ver, nil
		}
		if !errors.Is(err, catalog.ErrConflict) {
			return 0, err
		}
	}
	if w.Fence == nil {
		return 0, fmt.Errorf("plugin %s KV kept changing: %w", w.Plugin, err)
	}
	return 0, fmt.Errorf("the grant of fence %d kept changing: %w", w.Fence.Fence, err)
}

func (p *pluginKVWriter) logWrite(w api.KVWrite) {
	op := "put"
	if w.Delete {
		op = "delete"
	}
	if w.Fence != nil {
		p.log.Debug("plugin KV written through the API", "plugin", w.Plugin, "key", string(w.Key), "op", op, "by", w.By,
			"fence_key", w.Fence.Key.Domain+":"+w.Fence.Key.Key, "fence", w.Fence.Fence)
		return
	}
	p.log.Info("plugin KV overridden by an operator", "plugin", w.Plugin, "key", string(w.Key), "op", op, "by", w.By)
}

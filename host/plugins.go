package host

import (
	"context"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"

	"github.com/hostd-dev/hostd/builtin/broadcast"
	"github.com/hostd-dev/hostd/host/api"
	"github.com/hostd-dev/hostd/runtime/wasm"
)

// openPlugins builds the Wasm plugin runtime from plugins.*: plugins from
// plugins.dir (default <data.dir>/plugins) and plugins.list, the
// compilation cache in <data.dir>/wasm-cache, plugin KV in the catalog.
// A plugin that fails to load is logged and shown by `hostd plugin ls`; it
// does not stop hostd. SIGHUP reloads the plugins, like
// POST /v1/plugins/reload. The broadcast engine (opened later) finds its
// handlers through h.plugins.
func openPlugins(ctx context.Context, h *Host) error {
	pc := h.Config().Plugins
	data := h.Config().Data
	cfg := wasm.Config{
		Dir: pc.Dir,
		Defaults: wasm.Limits{
			CallTimeout: pc.CallTimeout,
			MemoryLimit: uint64(pc.MemoryLimit),
			PoolSize:    pc.PoolSize,
			KVMaxKeys:   pc.KVMaxKeys,
			KVMaxBytes:  int64(pc.KVMaxBytes),
		},
		Store:          h.Catalog(),
		Clock:          h.Clock(),
		Logger:         h.Logger().With("component", "plugins"),
		TracerProvider: h.TracerProvider(),
		MeterProvider:  h.MeterProvider(),
		InUse:          h.pluginTypeInUse,
	}
	if !data.InMemory {
		if cfg.Dir == "" {
			// The default directory is created, so operators can drop
			// plugins into it.
			cfg.Dir = filepath.Join(data.Dir, "plugins")
			if err := os.MkdirAll(cfg.Dir, 0o755); err != nil {
				return err
			}
		}
		cfg.CacheDir = filepath.Join(data.Dir, "wasm-cache")
		if err := os.MkdirAll(cfg.CacheDir, 0o755); err != nil {
			return err
		}
	}
	for _, p := range pc.List {
		cfg.Plugins = append(cfg.Plugins, wasm.Spec{Name: p.Name, Path: p.Path, Config: p.Config, Limits: wasm.Limits{
			CallTimeout: p.CallTimeout, MemoryLimit: uint64(p.MemoryLimit), PoolSize: p.PoolSize,
			KVMaxKeys: p.KVMaxKeys, KVMaxBytes: int64(p.KVMaxBytes),
		}})
	}
	rt, err := wasm.New(ctx, cfg)
	if rt == nil {
		return err
	}
	if err != nil {
		// Already logged per plugin by the runtime; hostd runs without them.
		h.Logger().Warn("some plugins failed to load; see `hostd plugin ls`", "component", "plugins", "err", err)
	}
	h.plugins = rt
	api.RegisterPlugins(h.API(), rt)

	stop := make(chan struct{})
	done := make(chan struct{})
	h.AddComponent("plugins", func(context.Context) error {
		hup := make(chan os.Signal, 1)
		signal.Notify(hup, syscall.SIGHUP)
		go func() {
			defer close(done)
			defer signal.Stop(hup)
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

package config

import (
	"fmt"
	"regexp"
	"time"
)

// Plugins configures the Wasm plugin runtime. Owned by the plugins feature;
// see docs/config.md and docs/plugin-abi.md.
type Plugins struct {
	// Dir holds the plugins' .wasm files; each file is a plugin named after
	// it. Default "" meaning <data.dir>/plugins (no directory with
	// data.in_memory).
	Dir string `koanf:"dir"`
	// CallTimeout bounds one plugin call. Default 5s.
	CallTimeout time.Duration `koanf:"call_timeout"`
	// InitTimeout bounds the start of one plugin instance (instantiation,
	// the module's start function, _initialize); a plugin that does not
	// start within it fails to load with an init-timeout error naming it.
	// Plugins load in the background while the API serves (/readyz waits
	// for them). Default 10s (0 < init_timeout <= 10m).
	InitTimeout time.Duration `koanf:"init_timeout"`
	// MemoryLimit is the most linear memory one instance may use.
	// Default 64MiB (64KiB..4GiB; a Go guest needs at least 2240KiB).
	MemoryLimit ByteSize `koanf:"memory_limit"`
	// PoolSize is the number of instances per plugin; 0 means GOMAXPROCS.
	// Default 0.
	PoolSize int `koanf:"pool_size"`
	// KVMaxKeys is each plugin's KV quota in keys. Default 100000.
	KVMaxKeys int64 `koanf:"kv_max_keys"`
	// KVMaxBytes is each plugin's KV quota in key+value bytes.
	// Default 64MiB.
	KVMaxBytes ByteSize `koanf:"kv_max_bytes"`
	// List names plugins explicitly, with settings; a plugin in Dir needs
	// no entry unless it has settings. Default: none.
	List []Plugin `koanf:"list"`
}

// Plugin is one plugin's settings. Zero limits take the plugins.* values.
type Plugin struct {
	// Name is the plugin's name ([a-z0-9][a-z0-9_.-]*). Default: the file
	// name without ".wasm". Name or Path is required.
	Name string `koanf:"name"`
	// Path is the .wasm file. Default <plugins.dir>/<name>.wasm.
	Path string `koanf:"path"`
	// Config is handed to the plugin (sdk.Config). Default: none.
	Config map[string]string `koanf:"config"`
	// CallTimeout, MemoryLimit, PoolSize, KVMaxKeys and KVMaxBytes override
	// the plugins.* defaults for this plugin.
	CallTimeout time.Duration `koanf:"call_timeout"`
	MemoryLimit ByteSize      `koanf:"memory_limit"`
	PoolSize    int           `koanf:"pool_size"`
	KVMaxKeys   int64         `koanf:"kv_max_keys"`
	KVMaxBytes  ByteSize      `koanf:"kv_max_bytes"`
	// Interrupt is how a call timeout stops this plugin's guest: "" or
	// "auto" (rewrite the module with interrupt checks; a module that
	// cannot be rewritten is refused) or "close-on-context-done" (the
	// operator's opt-in for such a module: never rewrite; guest loops run
	// many times slower). docs/plugin-abi.md, "Timeouts".
	Interrupt string `koanf:"interrupt"`
}

var pluginNameRE = regexp.MustCompile(`^[a-z0-9][a-z0-9_.-]{0,63}$`)

func defaultPlugins() Plugins {
	return Plugins{CallTimeout: 5 * time.Second, InitTimeout: 10 * time.Second, MemoryLimit: 64 << 20, KVMaxKeys: 100000, KVMaxBytes: 64 << 20}
}

const minPluginMemory = 64 << 10 // one page; a Go guest needs 35 (2240KiB)

func (c *Plugins) validate(p *problems) {
	positive(p, "plugins.call_timeout", c.CallTimeout)
	if c.InitTimeout <= 0 || c.InitTimeout > 10*time.Minute {
		p.addOnce("plugins.init_timeout", "must be > 0 and <= 10m, got %s", c.InitTimeout)
	}
	if c.MemoryLimit < minPluginMemory || c.MemoryLimit > 4<<30 {
		p.addOnce("plugins.memory_limit", "must be between %s (one page; a Go guest needs 2240KiB) and 4GiB, got %s", ByteSize(minPluginMemory), c.MemoryLimit)
	}
	if c.PoolSize < 0 || c.PoolSize > 1024 {
		p.addOnce("plugins.pool_size", "must be 0..1024 (0 = GOMAXPROCS), got %d", c.PoolSize)
	}
	if c.KVMaxKeys < 1 {
		p.addOnce("plugins.kv_max_keys", "must be >= 1, got %d", c.KVMaxKeys)
	}
	if c.KVMaxBytes < 1 {
		p.addOnce("plugins.kv_max_bytes", "must be >= 1, got %s", c.KVMaxBytes)
	}
	seen := map[string]bool{}
	for i, pl := range c.List {
		key := fmt.Sprintf("plugins.list[%d]", i)
		if pl.Name == "" && pl.Path == "" {
			p.add(key, "name or path is required")
		}
		if pl.Name != "" {
			if !pluginNameRE.MatchString(pl.Name) {
				p.add(key+".name", "%q must match %s", pl.Name, pluginNameRE)
			}
			if seen[pl.Name] {
				p.add(key+".name", "%q is listed twice", pl.Name)
			}
			seen[pl.Name] = true
		}
		if pl.CallTimeout < 0 {
			p.add(key+".call_timeout", "must be >= 0 (0 = plugins.call_timeout), got %s", pl.CallTimeout)
		}
		if pl.MemoryLimit != 0 && (pl.MemoryLimit < minPluginMemory || pl.MemoryLimit > 4<<30) {
			p.add(key+".memory_limit", "must be 0 or between %s and 4GiB, got %s", ByteSize(minPluginMemory), pl.MemoryLimit)
		}
		if pl.PoolSize < 0 || pl.PoolSize > 1024 {
			p.add(key+".pool_size", "must be 0..1024, got %d", pl.PoolSize)
		}
		if pl.KVMaxKeys < 0 || pl.KVMaxBytes < 0 {
			p.add(key, "kv_max_keys and kv_max_bytes must be >= 0")
		}
		switch pl.Interrupt {
		case "", "auto", "close-on-context-done":
		default:
			p.add(key+".interrupt", "must be \"auto\" or \"close-on-context-done\", got %q", pl.Interrupt)
		}
	}
}

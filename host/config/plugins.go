package config

import "time"

// Plugins configures the Wasm plugin runtime. Owned by the plugins feature;
// see docs/config.md.
type Plugins struct {
	// Dir holds the plugins' .wasm files. Default "" meaning
	// <data.dir>/plugins (no plugins with data.in_memory).
	Dir string `koanf:"dir"`
	// CallTimeout bounds one plugin call. Default 5s.
	CallTimeout time.Duration `koanf:"call_timeout"`
	// MemoryLimit is the most linear memory one instance may use.
	// Default 64MiB.
	MemoryLimit ByteSize `koanf:"memory_limit"`
	// PoolSize is the number of instances per plugin; 0 means GOMAXPROCS.
	// Default 0.
	PoolSize int `koanf:"pool_size"`
}

func defaultPlugins() Plugins {
	return Plugins{CallTimeout: 5 * time.Second, MemoryLimit: 64 << 20}
}

func (c *Plugins) validate(p *problems) {
	positive(p, "plugins.call_timeout", c.CallTimeout)
	if c.MemoryLimit < 64<<10 || c.MemoryLimit > 4<<30 {
		p.addOnce("plugins.memory_limit", "must be between 64KiB and 4GiB, got %s", c.MemoryLimit)
	}
	if c.PoolSize < 0 {
		p.addOnce("plugins.pool_size", "must be >= 0 (0 = GOMAXPROCS), got %d", c.PoolSize)
	}
}

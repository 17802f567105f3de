package config

import "time"

// Data configures the embedded catalog (Badger) that holds all durable state.
type Data struct {
	// Dir is the data directory; created if absent. Relative paths are
	// relative to the working directory. Default "./hostd-data".
	Dir string `koanf:"dir"`
	// InMemory keeps all state in memory and loses it on exit (tests and
	// demos). Default false.
	InMemory bool `koanf:"in_memory"`
	// SyncWrites fsyncs every commit before it is acknowledged. Turning it
	// off risks losing acknowledged work on a power failure. Default true.
	SyncWrites bool `koanf:"sync_writes"`
	// GCInterval is how often Badger's value-log GC runs; 0 disables it.
	// Default 5m.
	GCInterval time.Duration `koanf:"gc_interval"`
	// GCDiscardRatio is the share of stale data in a value-log file that
	// makes GC rewrite it, in (0, 1). Default 0.5.
	GCDiscardRatio float64 `koanf:"gc_discard_ratio"`
}

func defaultData() Data {
	return Data{
		Dir:            "./hostd-data",
		SyncWrites:     true,
		GCInterval:     5 * time.Minute,
		GCDiscardRatio: 0.5,
	}
}

func (d *Data) validate(p *problems) {
	if !d.InMemory && d.Dir == "" {
		p.addOnce("data.dir", "required unless data.in_memory is true")
	}
	if d.GCInterval < 0 {
		p.addOnce("data.gc_interval", "must be >= 0 (0 disables), got %s", d.GCInterval)
	}
	if d.GCDiscardRatio <= 0 || d.GCDiscardRatio >= 1 {
		p.addOnce("data.gc_discard_ratio", "must be between 0 and 1 (exclusive), got %v", d.GCDiscardRatio)
	}
}

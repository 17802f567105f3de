package config

import "time"

// Locks configures resource-key and lease locks. Owned by the locks
// feature; see docs/config.md.
type Locks struct {
	// DefaultTTL is the lease TTL when a request gives none. Default 30s.
	DefaultTTL time.Duration `koanf:"default_ttl"`
	// MaxTTL is the longest lease TTL accepted. Default 10m.
	MaxTTL time.Duration `koanf:"max_ttl"`
}

func defaultLocks() Locks {
	return Locks{DefaultTTL: 30 * time.Second, MaxTTL: 10 * time.Minute}
}

func (l *Locks) validate(p *problems) {
	positive(p, "locks.default_ttl", l.DefaultTTL)
	positive(p, "locks.max_ttl", l.MaxTTL)
	if l.DefaultTTL > 0 && l.MaxTTL > 0 && l.DefaultTTL > l.MaxTTL {
		p.addOnce("locks.default_ttl", "must not exceed locks.max_ttl (%s), got %s", l.MaxTTL, l.DefaultTTL)
	}
}

package config

import "time"

// Broadcast configures the atomic broadcast engine. Owned by the broadcast
// feature; see docs/config.md.
type Broadcast struct {
	// MaxAttempts bounds ack-callback attempts per vchannel; 0 = unlimited.
	// Default 0.
	MaxAttempts int `koanf:"max_attempts"`
	// MaxKeyLength is the longest idempotency key accepted, in bytes.
	// Default 256.
	MaxKeyLength int `koanf:"max_key_length"`
	// Tombstones bounds how long finished broadcasts are remembered for
	// idempotency.
	Tombstones Tombstones `koanf:"tombstones"`
}

// Tombstones configures finished-broadcast retention.
type Tombstones struct {
	// MaxLifetime drops tombstones older than this. Default 24h.
	MaxLifetime time.Duration `koanf:"max_lifetime"`
	// MaxCount keeps at most this many tombstones (oldest dropped first).
	// Default 8192.
	MaxCount int `koanf:"max_count"`
	// CheckInterval is how often the limits are enforced. Default 5m.
	CheckInterval time.Duration `koanf:"check_interval"`
}

func defaultBroadcast() Broadcast {
	return Broadcast{
		MaxKeyLength: 256,
		Tombstones: Tombstones{
			MaxLifetime:   24 * time.Hour,
			MaxCount:      8192,
			CheckInterval: 5 * time.Minute,
		},
	}
}

func (b *Broadcast) validate(p *problems) {
	if b.MaxAttempts < 0 {
		p.addOnce("broadcast.max_attempts", "must be >= 0 (0 = unlimited), got %d", b.MaxAttempts)
	}
	if b.MaxKeyLength < 1 || b.MaxKeyLength > 4096 {
		p.addOnce("broadcast.max_key_length", "must be in [1, 4096], got %d", b.MaxKeyLength)
	}
	positive(p, "broadcast.tombstones.max_lifetime", b.Tombstones.MaxLifetime)
	if b.Tombstones.MaxCount < 1 {
		p.addOnce("broadcast.tombstones.max_count", "must be >= 1, got %d", b.Tombstones.MaxCount)
	}
	positive(p, "broadcast.tombstones.check_interval", b.Tombstones.CheckInterval)
}

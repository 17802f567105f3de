package config

import (
	"time"
)

// Mapping configures static topics and logic queues. Owned by the mapping
// feature; see docs/config.md.
type Mapping struct {
	// ControlChannel is the reserved vchannel every broadcast includes
	// (topic "_control", one logic queue). Default "_control/0"; it cannot
	// be changed.
	ControlChannel string `koanf:"control_channel"`
	// Brokers are the named owners of physical queues that mapping
	// policies place logic queues on. Labels (e.g. zone: a) are passed to
	// plugin policies such as zone-spread. Default: one broker "local".
	Brokers []MappingBroker `koanf:"brokers"`
	// ControlRetention bounds the control channel's log.
	ControlRetention MappingRetention `koanf:"control_retention"`
	// RetentionInterval is how often retention runs. Default 1m.
	RetentionInterval time.Duration `koanf:"retention_interval"`
	// HoldTimeout bounds how long appends to a queue being remapped wait
	// for the remap to commit. Default 2s.
	HoldTimeout time.Duration `koanf:"hold_timeout"`
}

// MappingBroker is one configured broker.
type MappingBroker struct {
	Name   string            `koanf:"name"`
	Labels map[string]string `koanf:"labels"`
}

// MappingRetention bounds a log: by age and/or bytes (0 = no bound).
type MappingRetention struct {
	MaxAge   time.Duration `koanf:"max_age"`
	MaxBytes ByteSize      `koanf:"max_bytes"`
}

func defaultMapping() Mapping {
	return Mapping{
		ControlChannel:    "_control/0",
		Brokers:           []MappingBroker{{Name: "local"}},
		RetentionInterval: time.Minute,
		HoldTimeout:       2 * time.Second,
	}
}

func (m *Mapping) validate(p *problems) {
	if m.ControlChannel != "_control/0" {
		p.addOnce("mapping.control_channel", "must be \"_control/0\" (logic queue 0 of topic _control), got %q", m.ControlChannel)
	}
	if len(m.Brokers) == 0 {
		p.addOnce("mapping.brokers", "at least one broker is required")
	}
	seen := map[string]bool{}
	for _, b := range m.Brokers {
		if !validBrokerName(b.Name) {
			p.add("mapping.brokers", "broker name %q must be 1..64 letters, digits, '.', '-', '_'", b.Name)
		}
		if seen[b.Name] {
			p.add("mapping.brokers", "duplicate broker %q", b.Name)
		}
		seen[b.Name] = true
	}
	if m.ControlRetention.MaxAge < 0 {
		p.addOnce("mapping.control_retention.max_age", "must be >= 0, got %s", m.ControlRetention.MaxAge)
	}
	if m.ControlRetention.MaxBytes < 0 {
		p.addOnce("mapping.control_retention.max_bytes", "must be >= 0")
	}
	if m.RetentionInterval <= 0 {
		p.addOnce("mapping.retention_interval", "must be > 0, got %s", m.RetentionInterval)
	}
	if m.HoldTimeout <= 0 {
		p.addOnce("mapping.hold_timeout", "must be > 0, got %s", m.HoldTimeout)
	}
}

func validBrokerName(s string) bool {
	if s == "" || len(s) > 64 {
		return false
	}
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '-' || r == '_') {
			return false
		}
	}
	return true
}

package config

// Mapping configures static topics and logic queues. Owned by the mapping
// feature; see docs/config.md.
type Mapping struct {
	// ControlChannel is the reserved vchannel every broadcast includes
	// (topic "_control", one logic queue). Default "_control/0".
	ControlChannel string `koanf:"control_channel"`
}

func defaultMapping() Mapping { return Mapping{ControlChannel: "_control/0"} }

func (m *Mapping) validate(p *problems) {
	if m.ControlChannel == "" {
		p.addOnce("mapping.control_channel", "required")
	}
}

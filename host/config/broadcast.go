package config

import (
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/hostd-dev/hostd/builtin/broadcast"
	"github.com/hostd-dev/hostd/runtime/catalog"
)

// Broadcast configures the atomic broadcast engine. Owned by the broadcast
// feature; see docs/config.md.
type Broadcast struct {
	// MaxAttempts bounds ack-callback attempts of a broadcast (for message
	// types that set no bound of their own); 0 = unlimited. Default 0.
	MaxAttempts int `koanf:"max_attempts"`
	// AllowUnhandledTypes accepts broadcasts of a message type that no
	// built-in or plugin registered (they run no callback). Default false:
	// such a request is rejected with a clear error.
	AllowUnhandledTypes bool `koanf:"allow_unhandled_types"`
	// MaxPayload is the largest message payload. Default 512KiB: the task
	// record keeps the payload base64-encoded (4/3 of it) and must fit one
	// catalog value (1 MiB) with the rest of the request.
	MaxPayload ByteSize `koanf:"max_payload"`
	// Vchannels are created at start as physical queues of the same name
	// when vchannels resolve 1:1 (before static topics are configured).
	// The control channel always exists. Default none.
	Vchannels []string `koanf:"vchannels"`
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
		MaxPayload:   512 << 10,
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
	if b.MaxPayload < 1 || b.MaxPayload > 64<<20 {
		p.addOnce("broadcast.max_payload", "must be in [1B, 64MiB], got %d bytes", int64(b.MaxPayload))
	} else if b.MaxKeyLength >= 1 && b.MaxKeyLength <= 4096 {
		// A broadcast at max_payload with the longest idempotency key to
		// every configured vchannel must fit one task record (a catalog
		// value) and one WAL record, else every such request would be
		// refused: reject the config instead.
		err := broadcast.CheckLimits(int(b.MaxPayload), b.MaxKeyLength, b.Vchannels,
			catalog.DefaultOptions("").MaxValueSize, broadcast.DefaultMaxMessageBytes)
		var tl *broadcast.TooLargeError
		if errors.As(err, &tl) {
			p.addOnce("broadcast.max_payload", "%s bytes cannot be stored: %s is %d bytes, limit %d (%s); lower max_payload (about %d bytes fits)",
				strconv.FormatInt(int64(b.MaxPayload), 10), tl.What, tl.Size, tl.Limit, tl.LimitOption, maxFittingPayload(b))
		} else if err != nil {
			p.addOnce("broadcast.max_payload", "%v", err)
		}
	}
	for i, v := range b.Vchannels {
		if v == "" {
			p.addOnce(fmt.Sprintf("broadcast.vchannels[%d]", i), "must not be empty")
		}
	}
	positive(p, "broadcast.tombstones.max_lifetime", b.Tombstones.MaxLifetime)
	if b.Tombstones.MaxCount < 1 {
		p.addOnce("broadcast.tombstones.max_count", "must be >= 1, got %d", b.Tombstones.MaxCount)
	}
	positive(p, "broadcast.tombstones.check_interval", b.Tombstones.CheckInterval)
}

// maxFittingPayload is the largest max_payload CheckLimits accepts with
// b's other options (binary search; 0 if none).
func maxFittingPayload(b *Broadcast) int {
	lo, hi := 0, int(b.MaxPayload)
	for lo < hi {
		mid := (lo + hi + 1) / 2
		if broadcast.CheckLimits(mid, b.MaxKeyLength, b.Vchannels, catalog.DefaultOptions("").MaxValueSize, broadcast.DefaultMaxMessageBytes) == nil {
			lo = mid
		} else {
			hi = mid - 1
		}
	}
	return lo
}

package sched

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"time"
)

// BackoffConfig configures exponential backoff. Start from DefaultBackoff.
type BackoffConfig struct {
	// Initial is the first delay. Default 10ms.
	Initial time.Duration
	// Max caps every delay. Default 10s.
	Max time.Duration
	// Multiplier grows the delay after each attempt. Default 2.
	Multiplier float64
	// Jitter in [0, 1] randomly shortens each delay by up to that
	// fraction (0.2: a delay d becomes something in [0.8d, d]). Default 0:
	// deterministic.
	Jitter float64
	// Seed seeds the jitter's random source, so a run is reproducible.
	Seed uint64
}

// DefaultBackoff returns 10ms, ×2, capped at 10s, no jitter.
func DefaultBackoff() BackoffConfig {
	return BackoffConfig{Initial: 10 * time.Millisecond, Max: 10 * time.Second, Multiplier: 2}
}

// Validate reports every problem of c at once.
func (c BackoffConfig) Validate() error {
	var errs []error
	if c.Initial <= 0 {
		errs = append(errs, fmt.Errorf("backoff.initial: must be > 0, got %s", c.Initial))
	}
	if c.Max < c.Initial {
		errs = append(errs, fmt.Errorf("backoff.max: must be >= initial (%s), got %s", c.Initial, c.Max))
	}
	if !(c.Multiplier >= 1) || math.IsInf(c.Multiplier, 0) {
		errs = append(errs, fmt.Errorf("backoff.multiplier: must be a finite number >= 1, got %v", c.Multiplier))
	}
	if !(c.Jitter >= 0 && c.Jitter <= 1) {
		errs = append(errs, fmt.Errorf("backoff.jitter: must be in [0, 1], got %v", c.Jitter))
	}
	return errors.Join(errs...)
}

// Delay returns the un-jittered delay before retry number attempt (0-based):
// min(Max, Initial × Multiplier^attempt). It never overflows.
func (c BackoffConfig) Delay(attempt int) time.Duration {
	if attempt < 0 {
		attempt = 0
	}
	d := float64(c.Initial) * math.Pow(c.Multiplier, float64(attempt))
	if math.IsNaN(d) || d >= float64(c.Max) {
		return c.Max
	}
	return time.Duration(d)
}

// Backoff hands out successive delays. Not safe for concurrent use: keep
// one per retrying thing.
type Backoff struct {
	cfg     BackoffConfig
	attempt int
	rnd     *rand.Rand
}

// NewBackoff returns a Backoff for a valid cfg.
func NewBackoff(cfg BackoffConfig) (*Backoff, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	b := &Backoff{cfg: cfg}
	if cfg.Jitter > 0 {
		b.rnd = rand.New(rand.NewPCG(cfg.Seed, cfg.Seed^0x9e3779b97f4a7c15))
	}
	return b, nil
}

// Next returns the delay before the next retry and advances.
func (b *Backoff) Next() time.Duration {
	d := b.cfg.Delay(b.attempt)
	if b.attempt < math.MaxInt32 {
		b.attempt++
	}
	if b.rnd != nil {
		d -= time.Duration(b.rnd.Float64() * b.cfg.Jitter * float64(d))
	}
	return d
}

// Attempt returns how many delays Next has handed out since the last Reset.
func (b *Backoff) Attempt() int { return b.attempt }

// Reset starts over at Initial (after a success).
func (b *Backoff) Reset() { b.attempt = 0 }

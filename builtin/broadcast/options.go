package broadcast

import (
	"errors"
	"fmt"
	"log/slog"
	"time"

	"go.opentelemetry.io/otel/metric"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/trace"
	tracenoop "go.opentelemetry.io/otel/trace/noop"

	"github.com/hostd-dev/hostd/runtime/catalog"
	"github.com/hostd-dev/hostd/runtime/sched"
)

// Defaults of Options (and of the host's `broadcast:` config section).
const (
	DefaultMaxKeyLen     = 256
	DefaultMaxPayload    = 512 << 10 // base64 in the task record: 4/3 of it must fit one catalog value
	DefaultMaxVChannels  = 1024
	DefaultMaxLifetime   = 24 * time.Hour
	DefaultMaxCount      = 8192
	DefaultCheckInterval = 5 * time.Minute
	DefaultAppendBatch   = 4096
)

// Backoff of append and callback retries: 10 ms initial, ×2, capped at 10 s.
const (
	backoffInitial = 10 * time.Millisecond
	backoffMax     = 10 * time.Second
)

// Options configure an Engine. Store, Locker and Channels are required.
type Options struct {
	Store    catalog.Store
	Locker   Locker
	Channels Channels
	// Handlers serves plugin message types; nil = built-ins only.
	Handlers HandlerSource
	// AllowUnhandled accepts types nobody serves (broadcast with no
	// callback). Default false: ErrUnknownType.
	AllowUnhandled bool
	// MaxKeyLen is the longest idempotency key in bytes (default 256).
	MaxKeyLen int
	// MaxPayload is the largest message payload in bytes (default 512 KiB:
	// the task record stores it base64-encoded, 4/3 of its size, and must
	// fit one catalog value with the rest of the request).
	MaxPayload int
	// MaxRecordBytes is the largest catalog value (a task record). Default:
	// the Store's own limit when it implements catalog.Limiter, else
	// DefaultMaxRecordBytes.
	MaxRecordBytes int
	// MaxMessageBytes is the largest WAL record (payload + properties +
	// headers). Default: DefaultMaxMessageBytes, capped 4 KiB below
	// MaxRecordBytes.
	MaxMessageBytes int
	// MaxVChannels bounds the targets of one broadcast (default 1024).
	MaxVChannels int
	// MaxLifetime: finished tasks older than this are removed (default 24h).
	MaxLifetime time.Duration
	// MaxCount: at most this many finished tasks are kept (default 8192).
	// At 1,000 broadcasts/s 8192 makes the idempotency window ~8 s.
	MaxCount int
	// CheckInterval of GC (default 5m); GC also runs at Start.
	CheckInterval time.Duration
	// AppendBatch bounds the entries of one append round (default 4096).
	AppendBatch int

	Clock          sched.Clock          // default sched.Real
	TracerProvider trace.TracerProvider // default no-op
	MeterProvider  metric.MeterProvider // default no-op
	Logger         *slog.Logger         // default slog.Default()
}

func (o *Options) setDefaults() {
	if o.MaxKeyLen == 0 {
		o.MaxKeyLen = DefaultMaxKeyLen
	}
	if o.MaxPayload == 0 {
		o.MaxPayload = DefaultMaxPayload
	}
	if o.MaxRecordBytes == 0 {
		o.MaxRecordBytes = DefaultMaxRecordBytes
		if l, ok := o.Store.(catalog.Limiter); ok {
			o.MaxRecordBytes = l.Limits().MaxValueSize
		}
	}
	if o.MaxMessageBytes == 0 {
		o.MaxMessageBytes = min(DefaultMaxMessageBytes, o.MaxRecordBytes-4<<10)
	}
	if o.MaxVChannels == 0 {
		o.MaxVChannels = DefaultMaxVChannels
	}
	if o.MaxLifetime == 0 {
		o.MaxLifetime = DefaultMaxLifetime
	}
	if o.MaxCount == 0 {
		o.MaxCount = DefaultMaxCount
	}
	if o.CheckInterval == 0 {
		o.CheckInterval = DefaultCheckInterval
	}
	if o.AppendBatch == 0 {
		o.AppendBatch = DefaultAppendBatch
	}
	if o.Clock == nil {
		o.Clock = sched.Real
	}
	if o.TracerProvider == nil {
		o.TracerProvider = tracenoop.NewTracerProvider()
	}
	if o.MeterProvider == nil {
		o.MeterProvider = metricnoop.NewMeterProvider()
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
}

// Validate returns every problem of o at once.
func (o *Options) Validate() error {
	var errs []error
	if o.Store == nil {
		errs = append(errs, errors.New("broadcast: Store is required"))
	}
	if o.Locker == nil {
		errs = append(errs, errors.New("broadcast: Locker is required"))
	}
	if o.Channels == nil {
		errs = append(errs, errors.New("broadcast: Channels is required"))
	}
	neg := func(name string, v int64) {
		if v < 0 {
			errs = append(errs, fmt.Errorf("broadcast: %s must not be negative (got %d)", name, v))
		}
	}
	neg("max_key_len", int64(o.MaxKeyLen))
	neg("max_payload", int64(o.MaxPayload))
	neg("max_vchannels", int64(o.MaxVChannels))
	neg("max_record_bytes", int64(o.MaxRecordBytes))
	neg("max_message_bytes", int64(o.MaxMessageBytes))
	neg("max_lifetime", int64(o.MaxLifetime))
	neg("max_count", int64(o.MaxCount))
	neg("check_interval", int64(o.CheckInterval))
	neg("append_batch", int64(o.AppendBatch))
	return errors.Join(errs...)
}

// backoff returns the delay before retry n (n >= 1).
func backoff(n int) time.Duration {
	d := backoffInitial
	for i := 1; i < n && d < backoffMax; i++ {
		d *= 2
	}
	if d > backoffMax {
		d = backoffMax
	}
	return d
}

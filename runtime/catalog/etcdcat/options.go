package etcdcat

import (
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"
)

// Options configure Open. Zero values take the defaults named on each
// field.
type Options struct {
	// Client is the etcd client (required). The caller owns it: Close of
	// a Store (fenced or not) never closes it.
	Client *clientv3.Client
	// Prefix is prepended to every etcd key this store reads or writes,
	// so several hostd clusters can share one etcd. Must end in "/".
	// Default "/hostd/".
	Prefix string
	// MaxTxnOps mirrors the server's --max-txn-ops (default 128). Open
	// refuses to start when the server takes fewer.
	MaxTxnOps int
	// MaxRequestBytes mirrors the server's --max-request-bytes (default
	// 1.5 MiB). Open refuses to start when the server takes less.
	MaxRequestBytes int
	// MaxKeySize is the largest catalog key accepted (default 4 KiB).
	MaxKeySize int
	// MaxValueSize is the largest value accepted (default 1 MiB); with
	// the key it must fit one request.
	MaxValueSize int
	// RequestTimeout bounds every etcd request the store makes (default
	// 10s). A commit whose request times out has an unknown outcome and
	// fails with the timeout error.
	RequestTimeout time.Duration
	// SequenceBlock is how many sequence values NextSequence reserves at
	// once (default 1024).
	SequenceBlock uint64
	// Logger receives the store's logs. Default: discard.
	Logger *slog.Logger
	// MeterProvider creates the store's metrics. Default: no-op.
	MeterProvider metric.MeterProvider
	// TracerProvider creates a span per Commit and Backup. Default: no-op.
	TracerProvider trace.TracerProvider
}

// Defaults of Options.
const (
	DefaultPrefix          = "/hostd/"
	DefaultMaxTxnOps       = 128
	DefaultMaxRequestBytes = 1536 << 10
	DefaultMaxKeySize      = 4 << 10
	DefaultMaxValueSize    = 1 << 20
	DefaultRequestTimeout  = 10 * time.Second
	DefaultSequenceBlock   = 1024
)

// requestMargin is kept free in every request for etcd's and gRPC's
// framing (the raft entry wraps the txn with a header).
const requestMargin = 16 << 10

// withDefaults fills zero fields.
func (o Options) withDefaults() Options {
	if o.Prefix == "" {
		o.Prefix = DefaultPrefix
	}
	if o.MaxTxnOps == 0 {
		o.MaxTxnOps = DefaultMaxTxnOps
	}
	if o.MaxRequestBytes == 0 {
		o.MaxRequestBytes = DefaultMaxRequestBytes
	}
	if o.MaxKeySize == 0 {
		o.MaxKeySize = DefaultMaxKeySize
	}
	if o.MaxValueSize == 0 {
		o.MaxValueSize = DefaultMaxValueSize
	}
	if o.RequestTimeout == 0 {
		o.RequestTimeout = DefaultRequestTimeout
	}
	if o.SequenceBlock == 0 {
		o.SequenceBlock = DefaultSequenceBlock
	}
	return o
}

// Validate reports every problem of o (after defaults) at once.
func (o Options) Validate() error {
	o = o.withDefaults()
	var errs []error
	bad := func(field, format string, args ...any) {
		errs = append(errs, fmt.Errorf("catalog.etcd.%s: %s", field, fmt.Sprintf(format, args...)))
	}
	if o.Client == nil {
		bad("client", "required")
	}
	if !strings.HasSuffix(o.Prefix, "/") {
		bad("prefix", "must end in \"/\", got %q", o.Prefix)
	}
	if o.MaxTxnOps < 4 {
		bad("max_txn_ops", "must be >= 4 (etcd's --max-txn-ops, default 128), got %d", o.MaxTxnOps)
	}
	if o.MaxRequestBytes < 64<<10 {
		bad("max_request_bytes", "must be >= 64 KiB (etcd's --max-request-bytes, default 1.5 MiB), got %d", o.MaxRequestBytes)
	}
	if o.MaxKeySize <= 0 || o.MaxKeySize > 65000 {
		bad("max_key_size", "must be in [1, 65000], got %d", o.MaxKeySize)
	}
	if o.MaxValueSize <= 0 {
		bad("max_value_size", "must be >= 1, got %d", o.MaxValueSize)
	} else if o.MaxValueSize+o.MaxKeySize+len(o.Prefix)+64 > o.MaxRequestBytes-requestMargin {
		bad("max_value_size", "%d bytes plus a key of max_key_size %d do not fit one request of max_request_bytes %d (minus %d of framing)", o.MaxValueSize, o.MaxKeySize, o.MaxRequestBytes, requestMargin)
	}
	if o.RequestTimeout < 0 {
		bad("request_timeout", "must be > 0, got %s", o.RequestTimeout)
	}
	return errors.Join(errs...)
}

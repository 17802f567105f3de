package jswal

import (
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"time"

	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel/metric"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/trace"
	tracenoop "go.opentelemetry.io/otel/trace/noop"

	"github.com/hostd-dev/hostd/runtime/sched"
)

// Storage is where JetStream keeps a stream.
type Storage string

const (
	// File storage: the recommended setup (with sync_interval: always on
	// the servers; see docs/jetstream-wal.md).
	File Storage = "file"
	// Memory storage: lost when the server stops. Tests and benchmarks.
	Memory Storage = "memory"
)

// Envelope is the room a record needs on the wire beyond its payload and
// properties: hostd's headers (term, producer, tick) plus NATS's own
// (Nats-Msg-Id of up to MaxIDBytes, the expected sequence) and the body's
// framing. The server's max_payload must be at least MaxRecordBytes +
// Envelope.
const Envelope = 1024

// MaxIDBytes bounds Record.ID (it travels as the Nats-Msg-Id header).
const MaxIDBytes = 256

// Options configure Open. Field comments give defaults.
type Options struct {
	// Conn is the NATS connection to use (not closed by Close). Either
	// Conn or URL is required.
	Conn *nats.Conn
	// URL is the server list to connect to when Conn is nil (the
	// connection is closed by Close).
	URL string
	// CredsFile, User/Password or Token authenticate a URL connection.
	CredsFile      string
	User, Password string
	Token          string

	// Replicas of each stream (1, 3 or 5). Default 1.
	Replicas int
	// Storage of each stream. Default File.
	Storage Storage
	// StreamPrefix starts every stream name and subject hostd creates
	// ([A-Za-z0-9_-], at most 32 bytes). Default "HOSTD".
	StreamPrefix string
	// Placement tags every new stream must match on its servers (broker
	// labels such as "az:a"). Optional.
	Placement []string

	// Term is this writer's leadership term: every record carries it, and
	// a writer with a lower term can no longer append to a queue once a
	// record of a higher term is in it (see Fence). 0 means unfenced.
	Term uint64
	// OnFenced, if set, is called once, the first time this writer finds
	// a queue fenced by a newer term (the call then fails with a
	// *FencedError): a cluster replica steps down at once instead of
	// waiting for its etcd session to expire.
	OnFenced func()
	// ProducerID names this writer in every record's Hostd-Producer
	// header (with a per-writer sequence in Hostd-Producer-Seq). Default:
	// a random id.
	ProducerID string

	// MaxRecordBytes bounds one record (payload + properties). Default
	// 1 MiB - 4 KiB, as the embedded WAL. Open refuses a server whose
	// max_payload is below MaxRecordBytes + Envelope (*PayloadError).
	MaxRecordBytes int
	// MaxBatchBytes bounds one Append call. Default 4 MiB.
	MaxBatchBytes int
	// Duplicates is each stream's duplicate window for Nats-Msg-Id.
	// Default 2 minutes (JetStream's). Reconcile does not depend on it.
	Duplicates time.Duration
	// RequestTimeout bounds each JetStream request (publish, get, info).
	// Default 5 s.
	RequestTimeout time.Duration
	// PollInterval is how often Wait looks again when no notification
	// came (a safety net; appends notify waiters at once). Default 1 s.
	PollInterval time.Duration

	// Clock drives record ticks (hybrid timestamps: above every tick this
	// writer handed out or read at a queue's tail). Default sched.Real.
	Clock sched.Clock

	// Logger, MeterProvider, TracerProvider: defaults are no-ops.
	Logger         *slog.Logger
	MeterProvider  metric.MeterProvider
	TracerProvider trace.TracerProvider
}

var prefixRE = regexp.MustCompile(`^[A-Za-z0-9_-]{1,32}$`)

func (o *Options) setDefaults() {
	if o.Replicas == 0 {
		o.Replicas = 1
	}
	if o.Storage == "" {
		o.Storage = File
	}
	if o.StreamPrefix == "" {
		o.StreamPrefix = "HOSTD"
	}
	if o.ProducerID == "" {
		o.ProducerID = nats.NewInbox()[len(nats.InboxPrefix):]
	}
	if o.MaxRecordBytes == 0 {
		o.MaxRecordBytes = 1<<20 - 4<<10
	}
	if o.MaxBatchBytes == 0 {
		o.MaxBatchBytes = 4 << 20
	}
	if o.Duplicates == 0 {
		o.Duplicates = 2 * time.Minute
	}
	if o.RequestTimeout == 0 {
		o.RequestTimeout = 5 * time.Second
	}
	if o.PollInterval == 0 {
		o.PollInterval = time.Second
	}
	if o.Clock == nil {
		o.Clock = sched.Real
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.MeterProvider == nil {
		o.MeterProvider = metricnoop.NewMeterProvider()
	}
	if o.TracerProvider == nil {
		o.TracerProvider = tracenoop.NewTracerProvider()
	}
}

// Validate reports every problem of o at once (after defaults), with the
// configuration key each belongs to.
func (o Options) Validate() error {
	var errs []error
	if o.Conn == nil && o.URL == "" {
		errs = append(errs, errors.New("wal.jetstream.url: required"))
	}
	if o.Conn != nil && o.URL != "" {
		errs = append(errs, errors.New("wal.jetstream.url: set either a connection or a URL, not both"))
	}
	if o.CredsFile != "" && (o.User != "" || o.Token != "") || o.User != "" && o.Token != "" {
		errs = append(errs, errors.New("wal.jetstream.credentials: use one of creds file, user/password, token"))
	}
	switch o.Replicas {
	case 1, 3, 5:
	default:
		errs = append(errs, fmt.Errorf("wal.jetstream.replicas: must be 1, 3 or 5, got %d", o.Replicas))
	}
	if o.Storage != File && o.Storage != Memory {
		errs = append(errs, fmt.Errorf("wal.jetstream.storage: must be file or memory, got %q", o.Storage))
	}
	if !prefixRE.MatchString(o.StreamPrefix) {
		errs = append(errs, fmt.Errorf("wal.jetstream.stream_prefix: must be 1-32 of [A-Za-z0-9_-], got %q", o.StreamPrefix))
	}
	for _, tag := range o.Placement {
		if tag == "" {
			errs = append(errs, errors.New("wal.jetstream.placement: empty tag"))
		}
	}
	if o.MaxRecordBytes <= 0 {
		errs = append(errs, fmt.Errorf("wal.max_record_bytes: must be > 0, got %d", o.MaxRecordBytes))
	}
	if o.MaxBatchBytes < o.MaxRecordBytes {
		errs = append(errs, fmt.Errorf("wal.max_batch_bytes: must be >= max_record_bytes, got %d", o.MaxBatchBytes))
	}
	if o.Duplicates < 0 || o.RequestTimeout < 0 || o.PollInterval < 0 {
		errs = append(errs, errors.New("wal.jetstream: durations must be >= 0"))
	}
	return errors.Join(errs...)
}

package wal

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/trace"
	tracenoop "go.opentelemetry.io/otel/trace/noop"

	"github.com/hostd-dev/hostd/runtime/catalog"
	"github.com/hostd-dev/hostd/runtime/sched"
)

// Record is what a caller appends: a payload and string properties
// (headers), and its Kind (data unless hostd writes it; see Kind). The
// offset and time tick are assigned by the log.
type Record struct {
	Payload []byte
	Props   map[string]string
	Kind    Kind
	// ID, if set, identifies the record for deduplication and reconcile
	// (the broadcast engine uses broadcast id + "/" + vchannel). It is
	// stored with the record and read back in Entry.ID; FindIDs and
	// AppendOnce match it. On JetStream it is also the Nats-Msg-Id.
	ID string
}

// Entry is one stored record with its log-assigned offset and time tick.
type Entry struct {
	Offset  uint64
	Tick    uint64 // hybrid timestamp, Unix nanoseconds; see Time
	Payload []byte
	Props   map[string]string
	Kind    Kind   // KindLegacy for entries written before kinds existed
	ID      string // Record.ID ("" if none)
}

// Time returns the entry's tick as a wall-clock time.
func (e Entry) Time() time.Time { return time.Unix(0, int64(e.Tick)) }

// Config configures Open.
type Config struct {
	// Store is the catalog holding the queues. Required.
	Store catalog.Store
	// Clock drives time ticks. Default sched.Real.
	Clock sched.Clock
	// Queues are created at Open if absent (e.g. the control channel
	// "_control/0" for the 1:1 resolver).
	Queues []string
	// MaxRecordBytes bounds one record (payload + properties).
	// Default 1 MiB - 4 KiB (a record must fit one catalog value).
	MaxRecordBytes int
	// MaxBatchBytes bounds one Append call and one grouped commit.
	// Default 4 MiB.
	MaxBatchBytes int
	// MaxBatchRecords bounds the records grouped into one commit (a single
	// call may exceed it). Default 4096.
	MaxBatchRecords int
	// TrimChunk is how many entries one trim commit deletes. Default 4096.
	TrimChunk int
	// MeterProvider, TracerProvider, Logger: defaults are no-ops.
	MeterProvider  metric.MeterProvider
	TracerProvider trace.TracerProvider
	Logger         *slog.Logger
}

func (c *Config) setDefaults() {
	if c.Clock == nil {
		c.Clock = sched.Real
	}
	if c.MaxRecordBytes == 0 {
		c.MaxRecordBytes = 1<<20 - 4<<10
	}
	if c.MaxBatchBytes == 0 {
		c.MaxBatchBytes = 4 << 20
	}
	if c.MaxBatchRecords == 0 {
		c.MaxBatchRecords = 4096
	}
	if c.TrimChunk == 0 {
		c.TrimChunk = 4096
	}
	if c.MeterProvider == nil {
		c.MeterProvider = metricnoop.NewMeterProvider()
	}
	if c.TracerProvider == nil {
		c.TracerProvider = tracenoop.NewTracerProvider()
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
}

// Validate reports every problem of c at once (after defaults).
func (c Config) Validate() error {
	var errs []error
	if c.Store == nil {
		errs = append(errs, errors.New("wal.store: required"))
	}
	for _, q := range c.Queues {
		if err := ValidateQueueName(q); err != nil {
			errs = append(errs, fmt.Errorf("wal.queues: %w", err))
		}
	}
	if c.MaxRecordBytes < 0 {
		errs = append(errs, fmt.Errorf("wal.max_record_bytes: must be > 0, got %d", c.MaxRecordBytes))
	}
	if c.MaxBatchBytes < 0 || (c.MaxBatchBytes > 0 && c.MaxBatchBytes < c.MaxRecordBytes) {
		errs = append(errs, fmt.Errorf("wal.max_batch_bytes: must be >= max_record_bytes, got %d", c.MaxBatchBytes))
	}
	if c.MaxBatchRecords < 0 {
		errs = append(errs, fmt.Errorf("wal.max_batch_records: must be > 0, got %d", c.MaxBatchRecords))
	}
	if c.TrimChunk < 0 {
		errs = append(errs, fmt.Errorf("wal.trim_chunk: must be > 0, got %d", c.TrimChunk))
	}
	return errors.Join(errs...)
}

// WAL is the set of physical queues of one catalog. Safe for concurrent
// use. Exactly one WAL may be open on a catalog at a time (it caches each
// queue's end offset; writers outside it must call Changed after they
// commit ops from CreateOps or SealOps).
type WAL struct {
	cfg    Config
	store  catalog.Store
	ticks  tickClock
	maxOps int // catalog entries one grouped round may take (0: no limit)

	mu     sync.Mutex
	queues map[string]*queue
	closed bool

	// The group committer (append.go): one leader at a time commits
	// everything queued, across all queues, as one catalog batch.
	amu      sync.Mutex
	apending []*appendReq
	arunning bool

	tracer    trace.Tracer
	mAppends  metric.Int64Counter
	mRecords  metric.Int64Counter
	mFailures metric.Int64Counter
	mBatch    metric.Int64Histogram
	mLatency  metric.Float64Histogram
	mTrimmed  metric.Int64Counter

	attrOK, attrFailed metric.MeasurementOption // built once: per-call attribute sets cost allocations
}

// queue is the in-memory state of one physical queue: its cached meta and
// the long-poll notifier.
type queue struct {
	name string

	mu     sync.Mutex
	loaded bool // m/ver mirror the catalog
	m      meta // cached meta
	ver    catalog.Version
	notify chan struct{} // closed and replaced when max grows

	trimMu sync.Mutex // serializes Trim and Delete of this queue
}

// Open opens the WAL on cfg.Store: it seeds the tick clock above every
// persisted tick, finishes deletions interrupted by a crash and creates
// cfg.Queues that do not exist.
func Open(ctx context.Context, cfg Config) (*WAL, error) {
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	w := &WAL{cfg: cfg, store: cfg.Store, queues: map[string]*queue{}}
	if l, ok := cfg.Store.(catalog.Limiter); ok {
		// A catalog whose commits hold few entries (etcd: --max-txn-ops)
		// bounds a grouped round, so that concurrent appends that fit on
		// their own are not failed together. A margin stays for the
		// tick and the term fence.
		if mo := l.Limits().MaxBatchOps; mo > 0 && mo < 1<<20 {
			w.maxOps = max(1, int(mo)-4)
		}
	}
	w.ticks.clock = cfg.Clock
	w.tracer = cfg.TracerProvider.Tracer("github.com/hostd-dev/hostd/runtime/wal")
	m := cfg.MeterProvider.Meter("github.com/hostd-dev/hostd/runtime/wal")
	w.mAppends, _ = m.Int64Counter("hostd.wal.appends", metric.WithDescription("Append calls that committed"))
	w.mRecords, _ = m.Int64Counter("hostd.wal.records", metric.WithDescription("records appended"))
	w.mFailures, _ = m.Int64Counter("hostd.wal.append_failures", metric.WithDescription("Append calls that failed"))
	w.mBatch, _ = m.Int64Histogram("hostd.wal.commit_records", metric.WithDescription("records per grouped commit"))
	w.mLatency, _ = m.Float64Histogram("hostd.wal.append_seconds", metric.WithUnit("s"), metric.WithDescription("Append latency"))
	w.attrOK = metric.WithAttributeSet(attribute.NewSet(attribute.Bool("ok", true)))
	w.attrFailed = metric.WithAttributeSet(attribute.NewSet(attribute.Bool("ok", false)))
	w.mTrimmed, _ = m.Int64Counter("hostd.wal.trimmed", metric.WithDescription("entries removed by Trim/Delete"))

	var deleting []string
	err := cfg.Store.View(ctx, func(r catalog.Reader) error {
		return r.Scan([]byte(prefixMeta), prefixEnd(prefixMeta), func(kv catalog.KV) error {
			md, err := decodeMeta(kv.Value)
			if err != nil {
				return &catalog.DecodeError{Key: kv.Key, Err: err}
			}
			w.ticks.observe(md.lastTick)
			if md.state == stateDeleting {
				deleting = append(deleting, string(kv.Key[len(prefixMeta):]))
			}
			return nil
		})
	})
	if err != nil {
		return nil, fmt.Errorf("wal: open: %w", err)
	}
	for _, q := range deleting {
		if err := w.finishDelete(ctx, q); err != nil {
			return nil, fmt.Errorf("wal: open: finish delete of %q: %w", q, err)
		}
	}
	for _, q := range cfg.Queues {
		if err := w.Create(ctx, q); err != nil && !errors.Is(err, ErrExists) {
			return nil, fmt.Errorf("wal: open: %w", err)
		}
	}
	return w, nil
}

// Close makes further calls fail with ErrClosed. It does not close the
// store. In-flight appends finish.
func (w *WAL) Close() error {
	w.mu.Lock()
	w.closed = true
	w.mu.Unlock()
	return nil
}

func prefixEnd(p string) []byte {
	b := []byte(p)
	b[len(b)-1]++
	return b
}

func (w *WAL) q(name string) (*queue, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return nil, ErrClosed
	}
	q := w.queues[name]
	if q == nil {
		q = &queue{name: name, notify: make(chan struct{})}
		w.queues[name] = q
	}
	return q, nil
}

// CreateOps returns the catalog writes that create queue (empty, offsets
// from 0) and the check that it does not exist yet, for callers that create
// queues in their own transaction (the mapping creates a segment's physical
// queue together with the new mapping). Call Changed(queue) after the
// commit.
func CreateOps(queue string) ([]catalog.Op, []catalog.Check, error) {
	if err := ValidateQueueName(queue); err != nil {
		return nil, nil, err
	}
	return []catalog.Op{
			{Key: metaKey(queue), Value: meta{}.encode()},
			{Key: minKey(queue), Value: encodeMin(0)},
		}, []catalog.Check{
			{Key: metaKey(queue), Version: 0},
		}, nil
}

// Create creates an empty queue. Errors: ErrExists, ErrInvalid, ErrClosed.
func (w *WAL) Create(ctx context.Context, queue string) error {
	ops, checks, err := CreateOps(queue)
	if err != nil {
		return err
	}
	if _, err := w.q(queue); err != nil {
		return err
	}
	if _, err := w.store.Commit(ctx, &catalog.Batch{Checks: checks, Ops: ops}); err != nil {
		if errors.Is(err, catalog.ErrConflict) {
			return fmt.Errorf("%w: %q", ErrExists, queue)
		}
		return fmt.Errorf("wal: create %q: %w", queue, err)
	}
	w.Changed(queue)
	return nil
}

// Seal describes a queue closed by SealOps.
type Seal struct {
	End      uint64 // exclusive end offset: no entry will ever be at or past it
	LastTick uint64 // tick of the last entry (0 if none)
}

// SealOps returns the writes that seal queue at its current end, as read
// from the snapshot r, and the check that no append committed since: if one
// did, the caller's commit fails with catalog.ErrConflict and it recomputes
// from a newer snapshot. After the commit, call Changed(queue): appends
// then fail with ErrSealed. Sealing a sealed queue returns its seal and no
// ops.
func SealOps(r catalog.Reader, queue string) (Seal, []catalog.Op, []catalog.Check, error) {
	m, ver, err := readMeta(r, queue)
	if err != nil {
		return Seal{}, nil, nil, err
	}
	s := Seal{End: m.next, LastTick: m.lastTick}
	if m.state == stateSealed {
		return s, nil, nil, nil
	}
	m.state = stateSealed
	return s, []catalog.Op{{Key: metaKey(queue), Value: m.encode()}},
		[]catalog.Check{{Key: metaKey(queue), Version: ver}}, nil
}

// Seal seals queue at its current end in a commit of its own (SealOps,
// retried if an append commits meanwhile) and returns the seal; sealing a
// sealed queue returns its seal. Callers that seal together with other
// catalog writes (the mapping's remap) use SealOps. Errors: ErrNoQueue.
func (w *WAL) Seal(ctx context.Context, queue string) (Seal, error) {
	for {
		var s Seal
		var ops []catalog.Op
		var checks []catalog.Check
		err := w.store.View(ctx, func(r catalog.Reader) error {
			var err error
			s, ops, checks, err = SealOps(r, queue)
			return err
		})
		if err != nil || len(ops) == 0 {
			return s, err
		}
		_, err = w.store.Commit(ctx, &catalog.Batch{Checks: checks, Ops: ops})
		if errors.Is(err, catalog.ErrConflict) {
			continue // an append committed meanwhile: seal at the new end
		}
		if err != nil {
			return Seal{}, fmt.Errorf("wal: seal %q: %w", queue, err)
		}
		w.Changed(queue)
		return s, nil
	}
}

func readMeta(r catalog.Reader, queue string) (meta, catalog.Version, error) {
	v, ver, err := r.Get(metaKey(queue))
	if errors.Is(err, catalog.ErrNotFound) {
		return meta{}, 0, noQueue(queue)
	}
	if err != nil {
		return meta{}, 0, err
	}
	m, err := decodeMeta(v)
	if err != nil {
		return meta{}, 0, &catalog.DecodeError{Key: metaKey(queue), Err: err}
	}
	if m.state == stateDeleting {
		return meta{}, 0, noQueue(queue)
	}
	return m, ver, nil
}

func readMin(r catalog.Reader, queue string) (uint64, catalog.Version, error) {
	v, ver, err := r.Get(minKey(queue))
	if errors.Is(err, catalog.ErrNotFound) {
		return 0, 0, nil
	}
	if err != nil {
		return 0, 0, err
	}
	m, err := decodeMin(v)
	if err != nil {
		return 0, 0, &catalog.DecodeError{Key: minKey(queue), Err: err}
	}
	return m, ver, nil
}

// Changed tells the WAL that queue's records were written outside it (by
// ops from CreateOps or SealOps): its cache is dropped and long-poll
// waiters wake up to look again.
func (w *WAL) Changed(queue string) {
	q, err := w.q(queue)
	if err != nil {
		return
	}
	q.mu.Lock()
	q.loaded = false
	close(q.notify)
	q.notify = make(chan struct{})
	q.mu.Unlock()
}

// Bounds describes a queue's retained range.
type Bounds struct {
	Min      uint64 // first retained offset
	Max      uint64 // next offset to be assigned (exclusive end)
	Sealed   bool
	LastTick uint64 // tick of the last entry, 0 if none ever
	Bytes    uint64 // bytes ever appended (retained bytes: see RetainedBytes)
}

// Bounds returns queue's retained range [Min, Max). Errors: ErrNoQueue.
func (w *WAL) Bounds(ctx context.Context, queue string) (Bounds, error) {
	var b Bounds
	err := w.store.View(ctx, func(r catalog.Reader) error {
		var err error
		b, err = ReadBounds(r, queue)
		return err
	})
	return b, err
}

// ReadBounds is Bounds on a caller's snapshot.
func ReadBounds(r catalog.Reader, queue string) (Bounds, error) {
	m, _, err := readMeta(r, queue)
	if err != nil {
		return Bounds{}, err
	}
	mn, _, err := readMin(r, queue)
	if err != nil {
		return Bounds{}, err
	}
	return Bounds{Min: mn, Max: m.next, Sealed: m.state == stateSealed, LastTick: m.lastTick, Bytes: m.bytes}, nil
}

// Min returns the first retained offset of queue.
func (w *WAL) Min(ctx context.Context, queue string) (uint64, error) {
	b, err := w.Bounds(ctx, queue)
	return b.Min, err
}

// Max returns the next offset queue will assign (its exclusive end).
func (w *WAL) Max(ctx context.Context, queue string) (uint64, error) {
	b, err := w.Bounds(ctx, queue)
	return b.Max, err
}

// Read returns up to limit entries of queue starting at offset from, in
// offset order. from == Max returns no entries (wait with Wait). Errors:
// ErrNoQueue, *RangeError (from < Min or from > Max), ErrInvalid.
func (w *WAL) Read(ctx context.Context, queue string, from uint64, limit int) ([]Entry, error) {
	var out []Entry
	err := w.store.View(ctx, func(r catalog.Reader) error {
		var err error
		out, err = ReadFrom(r, queue, from, limit)
		return err
	})
	return out, err
}

// ReadFrom is Read on a caller's snapshot.
func ReadFrom(r catalog.Reader, queue string, from uint64, limit int) ([]Entry, error) {
	if limit <= 0 {
		return nil, fmt.Errorf("%w: limit must be > 0, got %d", ErrInvalid, limit)
	}
	b, err := ReadBounds(r, queue)
	if err != nil {
		return nil, err
	}
	if from < b.Min || from > b.Max {
		return nil, &RangeError{Queue: queue, Offset: from, Min: b.Min, Max: b.Max}
	}
	var out []Entry
	want := from
	err = r.Scan(entryKey(queue, from), entryEnd(queue), func(kv catalog.KV) error {
		off, ok := entryOffset(queue, kv.Key)
		if !ok || off != want {
			return &catalog.DecodeError{Key: kv.Key, Err: fmt.Errorf("expected entry %d of %q", want, queue)}
		}
		e, _, err := decodeEntry(off, kv.Value)
		if err != nil {
			return &catalog.DecodeError{Key: kv.Key, Err: err}
		}
		out = append(out, e)
		want++
		if len(out) >= limit || want >= b.Max {
			return catalog.ErrStop
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

func entryOffset(queue string, key []byte) (uint64, bool) {
	p := len(prefixEntry) + len(queue) + 1
	if len(key) != p+8 || !bytes.HasPrefix(key, []byte(prefixEntry+queue+"\x00")) {
		return 0, false
	}
	var off uint64
	for _, c := range key[p:] {
		off = off<<8 | uint64(c)
	}
	return off, true
}

// readEntry returns the entry at off and the queue's cumulative bytes
// before it.
func readEntry(r catalog.Reader, queue string, off uint64) (Entry, uint64, error) {
	v, _, err := r.Get(entryKey(queue, off))
	if err != nil {
		return Entry{}, 0, err
	}
	e, cum, err := decodeEntry(off, v)
	if err != nil {
		return Entry{}, 0, &catalog.DecodeError{Key: entryKey(queue, off), Err: err}
	}
	return e, cum, nil
}

// Wait blocks until queue's Max exceeds offset (an entry at offset exists),
// the queue is sealed at or before offset (ErrSealed), or ctx ends.
// Errors: ErrNoQueue, ErrSealed, ctx.Err().
func (w *WAL) Wait(ctx context.Context, queue string, offset uint64) error {
	q, err := w.q(queue)
	if err != nil {
		return err
	}
	for {
		q.mu.Lock()
		ch := q.notify
		loaded, m := q.loaded, q.m
		q.mu.Unlock()
		if !loaded {
			var b Bounds
			b, err = w.Bounds(ctx, queue)
			if err != nil {
				return err
			}
			m.next = b.Max
			if b.Sealed {
				m.state = stateSealed
			}
		}
		if m.next > offset {
			return nil
		}
		if m.state == stateSealed {
			return fmt.Errorf("%w: %q ends at %d", ErrSealed, queue, m.next)
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// OffsetAtTick returns the offset of the first retained entry whose tick is
// >= tick, or Max if there is none (binary search; ticks increase with
// offsets).
func OffsetAtTick(r catalog.Reader, queue string, tick uint64) (uint64, error) {
	b, err := ReadBounds(r, queue)
	if err != nil {
		return 0, err
	}
	lo, hi := b.Min, b.Max
	for lo < hi {
		mid := lo + (hi-lo)/2
		e, _, err := readEntry(r, queue, mid)
		if err != nil {
			return 0, err
		}
		if e.Tick >= tick {
			hi = mid
		} else {
			lo = mid + 1
		}
	}
	return lo, nil
}

// OffsetKeepingBytes returns the smallest offset o >= Min such that the
// entries [o, Max) hold at most maxBytes (as counted by the WAL).
func OffsetKeepingBytes(r catalog.Reader, queue string, maxBytes uint64) (uint64, error) {
	b, err := ReadBounds(r, queue)
	if err != nil {
		return 0, err
	}
	lo, hi := b.Min, b.Max
	for lo < hi {
		mid := lo + (hi-lo)/2
		_, cum, err := readEntry(r, queue, mid)
		if err != nil {
			return 0, err
		}
		if b.Bytes-cum <= maxBytes {
			hi = mid
		} else {
			lo = mid + 1
		}
	}
	return lo, nil
}

// BytesFrom returns the bytes held by entries [from, Max) of queue (0 if
// from >= Max; from must be >= Min).
func BytesFrom(r catalog.Reader, queue string, from uint64) (uint64, error) {
	b, err := ReadBounds(r, queue)
	if err != nil || from >= b.Max {
		return 0, err
	}
	if from < b.Min {
		return 0, &RangeError{Queue: queue, Offset: from, Min: b.Min, Max: b.Max}
	}
	_, cum, err := readEntry(r, queue, from)
	if err != nil {
		return 0, err
	}
	return b.Bytes - cum, nil
}

// RetainedBytes returns the bytes held by entries [Min, Max) of queue.
func RetainedBytes(r catalog.Reader, queue string) (uint64, error) {
	b, err := ReadBounds(r, queue)
	if err != nil || b.Min >= b.Max {
		return 0, err
	}
	_, cum, err := readEntry(r, queue, b.Min)
	if err != nil {
		return 0, err
	}
	return b.Bytes - cum, nil
}

// Trim removes the entries of queue below offset to (clamped to Max) and
// moves Min up to it, in commits of at most TrimChunk deletions. It returns
// the new Min. Trimming below Min does nothing.
func (w *WAL) Trim(ctx context.Context, queue string, to uint64) (uint64, error) {
	q, err := w.q(queue)
	if err != nil {
		return 0, err
	}
	q.trimMu.Lock()
	defer q.trimMu.Unlock()
	for {
		var b Bounds
		var minVer catalog.Version
		err := w.store.View(ctx, func(r catalog.Reader) error {
			var err error
			if b, err = ReadBounds(r, queue); err != nil {
				return err
			}
			_, minVer, err = readMin(r, queue)
			return err
		})
		if err != nil {
			return 0, err
		}
		if to > b.Max {
			to = b.Max
		}
		if to <= b.Min {
			return b.Min, nil
		}
		end := to
		if end-b.Min > uint64(w.cfg.TrimChunk) {
			end = b.Min + uint64(w.cfg.TrimChunk)
		}
		ops := make([]catalog.Op, 0, end-b.Min+1)
		for o := b.Min; o < end; o++ {
			ops = append(ops, catalog.Op{Key: entryKey(queue, o), Delete: true})
		}
		ops = append(ops, catalog.Op{Key: minKey(queue), Value: encodeMin(end)})
		if _, err := w.store.Commit(ctx, &catalog.Batch{
			Checks: []catalog.Check{{Key: minKey(queue), Version: minVer}},
			Ops:    ops,
		}); err != nil {
			return 0, fmt.Errorf("wal: trim %q: %w", queue, err)
		}
		w.mTrimmed.Add(ctx, int64(end-b.Min))
		if end == to {
			return end, nil
		}
	}
}

// Delete removes queue and all its entries. A crash midway is finished by
// the next Open. Errors: ErrNoQueue.
func (w *WAL) Delete(ctx context.Context, queue string) error {
	q, err := w.q(queue)
	if err != nil {
		return err
	}
	q.trimMu.Lock()
	defer q.trimMu.Unlock()
	for {
		var m meta
		var ver catalog.Version
		err := w.store.View(ctx, func(r catalog.Reader) error {
			var err error
			m, ver, err = readMeta(r, queue)
			return err
		})
		if err != nil {
			return err
		}
		m.state = stateDeleting
		_, err = w.store.Commit(ctx, &catalog.Batch{
			Checks: []catalog.Check{{Key: metaKey(queue), Version: ver}},
			Ops:    []catalog.Op{{Key: metaKey(queue), Value: m.encode()}},
		})
		if errors.Is(err, catalog.ErrConflict) {
			continue // an append raced us; look again
		}
		if err != nil {
			return fmt.Errorf("wal: delete %q: %w", queue, err)
		}
		break
	}
	w.Changed(queue)
	return w.finishDelete(ctx, queue)
}

func (w *WAL) finishDelete(ctx context.Context, queue string) error {
	for {
		var keys [][]byte
		err := w.store.View(ctx, func(r catalog.Reader) error {
			return r.Scan(entryKey(queue, 0), entryEnd(queue), func(kv catalog.KV) error {
				keys = append(keys, kv.Key)
				if len(keys) >= w.cfg.TrimChunk {
					return catalog.ErrStop
				}
				return nil
			})
		})
		if err != nil {
			return err
		}
		ops := make([]catalog.Op, 0, len(keys)+2)
		for _, k := range keys {
			ops = append(ops, catalog.Op{Key: k, Delete: true})
		}
		last := len(keys) < w.cfg.TrimChunk
		if last {
			ops = append(ops, catalog.Op{Key: metaKey(queue), Delete: true}, catalog.Op{Key: minKey(queue), Delete: true})
		}
		if _, err := w.store.Commit(ctx, &catalog.Batch{Ops: ops}); err != nil {
			return fmt.Errorf("wal: delete %q: %w", queue, err)
		}
		w.mTrimmed.Add(ctx, int64(len(keys)))
		if last {
			return nil
		}
	}
}

// ListQueues lists, on snapshot r, the existing physical queues with
// names starting with prefix, in name order.
func ListQueues(r catalog.Reader, prefix string) ([]string, error) {
	var out []string
	start := []byte(prefixMeta + prefix)
	err := r.Scan(start, nil, func(kv catalog.KV) error {
		if !bytes.HasPrefix(kv.Key, start) {
			return catalog.ErrStop
		}
		m, err := decodeMeta(kv.Value)
		if err != nil {
			return &catalog.DecodeError{Key: kv.Key, Err: err}
		}
		if m.state != stateDeleting {
			out = append(out, string(kv.Key[len(prefixMeta):]))
		}
		return nil
	})
	return out, err
}

// DropEmptyOps returns the writes that remove queue if, in snapshot r, it
// never held an entry, with the check that it still has none at commit.
// Errors: ErrNoQueue; ErrInvalid if the queue is not empty.
func DropEmptyOps(r catalog.Reader, queue string) ([]catalog.Op, []catalog.Check, error) {
	m, ver, err := readMeta(r, queue)
	if err != nil {
		return nil, nil, err
	}
	if m.next != 0 {
		return nil, nil, fmt.Errorf("%w: queue %q is not empty", ErrInvalid, queue)
	}
	return []catalog.Op{{Key: metaKey(queue), Delete: true}, {Key: minKey(queue), Delete: true}},
		[]catalog.Check{{Key: metaKey(queue), Version: ver}}, nil
}

// Queues lists the existing physical queues with names starting with
// prefix, in name order.
func (w *WAL) Queues(ctx context.Context, prefix string) ([]string, error) {
	var out []string
	err := w.store.View(ctx, func(r catalog.Reader) error {
		start := []byte(prefixMeta + prefix)
		return r.Scan(start, nil, func(kv catalog.KV) error {
			if !bytes.HasPrefix(kv.Key, start) {
				return catalog.ErrStop
			}
			m, err := decodeMeta(kv.Value)
			if err != nil {
				return &catalog.DecodeError{Key: kv.Key, Err: err}
			}
			if m.state != stateDeleting {
				out = append(out, string(kv.Key[len(prefixMeta):]))
			}
			return nil
		})
	})
	return out, err
}

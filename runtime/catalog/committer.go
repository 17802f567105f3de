package catalog

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	badger "github.com/dgraph-io/badger/v4"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/hostd-dev/hostd/runtime/failpoint"
)

// Request states: a queued request is taken by the committer or abandoned
// by its caller (context done), whichever comes first.
const (
	reqQueued int32 = iota
	reqTaken
	reqAbandoned
)

type result struct {
	ver     Version
	err     error
	writers int // writers in the round (for the span)
}

type request struct {
	b     *Batch
	size  int64 // conservative Badger size estimate of b.Ops
	state atomic.Int32
	done  chan result
}

// Stats counts the committer's work since Open.
type Stats struct {
	Rounds    uint64 // commit rounds run
	Txns      uint64 // Badger transactions committed
	Writers   uint64 // batches processed (committed or failed)
	Committed uint64 // batches committed
	Conflicts uint64 // batches failed with ErrConflict
}

// committer is the single goroutine through which every write goes. See
// doc.go "Committer".
type committer struct {
	db *DB

	mu      sync.Mutex // guards queue, stopped
	queue   []*request
	stopped bool
	wake    chan struct{} // cap 1
	quit    chan struct{}
	done    chan struct{}

	rounds, txns, writers, committed, conflicts atomic.Uint64

	// roundHook, if set (tests, through SetRoundHook), runs at the start
	// of every round with the number of writers taken.
	roundHook atomic.Pointer[func(writers int)]
}

// queued returns how many requests wait for the next round (tests).
func (c *committer) queued() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.queue)
}

func newCommitter(db *DB) *committer {
	c := &committer{
		db:   db,
		wake: make(chan struct{}, 1),
		quit: make(chan struct{}),
		done: make(chan struct{}),
	}
	go c.run()
	return c
}

// Stats returns counters of the committer's work.
func (db *DB) Stats() Stats {
	c := db.c
	return Stats{
		Rounds:    c.rounds.Load(),
		Txns:      c.txns.Load(),
		Writers:   c.writers.Load(),
		Committed: c.committed.Load(),
		Conflicts: c.conflicts.Load(),
	}
}

// Commit applies b atomically and durably through the batching committer.
// See Store.Commit. Additional errors: ErrInvalid (empty key, reserved
// prefix, sys/ namespace). ErrTooLarge names the sizes and the limits.
// If ctx ends before the committer takes b, nothing is applied and ctx's
// error is returned; once taken, Commit waits for the outcome.
func (db *DB) Commit(ctx context.Context, b *Batch) (Version, error) {
	ctx, span := db.tracer.Start(ctx, "catalog.Commit", trace.WithSpanKind(trace.SpanKindInternal))
	defer span.End()
	if b != nil {
		span.SetAttributes(attribute.Int("catalog.ops", len(b.Ops)), attribute.Int("catalog.checks", len(b.Checks)+len(b.RangeChecks)))
	}
	r := db.c.commitResult(ctx, b, false)
	if r.err != nil {
		span.RecordError(r.err)
		span.SetStatus(codes.Error, r.err.Error())
	} else {
		span.SetAttributes(attribute.Int64("catalog.version", int64(r.ver)), attribute.Int("catalog.round.writers", r.writers))
	}
	return r.ver, r.err
}

// maxTxn returns the largest size and count one Badger transaction takes,
// with a margin below Badger's own limits.
func (c *committer) maxTxn() (size, count int64) {
	return c.db.bdb.MaxBatchSize() * 9 / 10, c.db.bdb.MaxBatchCount() * 9 / 10
}

func (c *committer) commit(ctx context.Context, b *Batch, internal bool) (Version, error) {
	r := c.commitResult(ctx, b, internal)
	return r.ver, r.err
}

func (c *committer) commitResult(ctx context.Context, b *Batch, internal bool) result {
	fail := func(err error) result { return result{err: err} }
	if b == nil {
		return fail(fmt.Errorf("%w: nil batch", ErrInvalid))
	}
	if err := ctx.Err(); err != nil {
		return fail(err)
	}
	var size int64
	for i, op := range b.Ops {
		if err := c.db.validateKey(op.Key, internal); err != nil {
			return fail(fmt.Errorf("op %d: %w", i, err))
		}
		if !op.Delete && len(op.Value) > c.db.opts.MaxValueSize {
			return fail(fmt.Errorf("%w: op %d: value of %q is %d bytes, limit is %d (max_value_size)", ErrTooLarge, i, op.Key, len(op.Value), c.db.opts.MaxValueSize))
		}
		size += entrySize(op)
	}
	for i, ch := range b.Checks {
		if len(ch.Key) == 0 {
			return fail(fmt.Errorf("%w: check %d: empty key", ErrInvalid, i))
		}
	}
	for i, rc := range b.RangeChecks {
		if rc.End != nil && bytes.Compare(rc.Start, rc.End) > 0 {
			return fail(fmt.Errorf("%w: range check %d: start %q > end %q", ErrInvalid, i, rc.Start, rc.End))
		}
	}
	maxSize, maxCount := c.maxTxn()
	if size >= maxSize || int64(len(b.Ops)) >= maxCount {
		return fail(fmt.Errorf("%w: %d ops of about %d bytes; one atomic commit holds fewer than %d ops and %d bytes (raise memtable_size or split the update)", ErrTooLarge, len(b.Ops), size, maxCount, maxSize))
	}
	req := &request{b: b, size: size, done: make(chan result, 1)}
	c.mu.Lock()
	if c.stopped {
		c.mu.Unlock()
		return fail(ErrClosed)
	}
	c.queue = append(c.queue, req)
	c.mu.Unlock()
	select {
	case c.wake <- struct{}{}:
	default:
	}
	select {
	case r := <-req.done:
		return r
	case <-ctx.Done():
		if req.state.CompareAndSwap(reqQueued, reqAbandoned) {
			return fail(ctx.Err())
		}
		return <-req.done
	}
}

// valueThreshold: values at least this long live in Badger's value log and
// count only a pointer against the transaction size.
const valueThreshold = 64 << 10

// entrySize over-estimates Badger's per-entry transaction size accounting
// (key + value or value pointer + metas + version), so a staged txn never
// hits ErrTxnTooBig.
func entrySize(op Op) int64 {
	v := int64(len(op.Value))
	if v >= valueThreshold {
		v = 12
	}
	return int64(len(op.Key)) + v + 2 + 10 + 8
}

// stop makes new commits fail with ErrClosed, lets the running round
// finish, fails every queued request with ErrClosed and waits for the
// goroutine to exit.
func (c *committer) stop() {
	c.mu.Lock()
	if c.stopped {
		c.mu.Unlock()
		<-c.done
		return
	}
	c.stopped = true
	c.mu.Unlock()
	close(c.quit)
	<-c.done
}

func (c *committer) run() {
	defer close(c.done)
	for {
		select {
		case <-c.quit:
		case <-c.wake:
		}
		select {
		case <-c.quit: // stopping wins over a pending wake-up
			c.mu.Lock()
			q := c.queue
			c.queue = nil
			c.mu.Unlock()
			for _, r := range q {
				r.done <- result{err: ErrClosed}
			}
			return
		default:
		}
		c.mu.Lock()
		q := c.queue
		c.queue = nil
		c.mu.Unlock()
		if len(q) > 0 {
			c.round(q)
		}
	}
}

// overlayEntry is the state a key will have after the earlier writers of
// the current round commit.
type overlayEntry struct{ deleted bool }

// chunk is the writers of one round that share one Badger transaction.
type chunk struct {
	reqs  []*request
	size  int64
	count int64
}

// round commits one round: every writer queued while the previous round ran.
func (c *committer) round(q []*request) {
	start := time.Now()
	db := c.db
	reqs := q[:0]
	for _, r := range q {
		if r.state.CompareAndSwap(reqQueued, reqTaken) {
			reqs = append(reqs, r)
		}
	}
	if len(reqs) == 0 {
		return
	}
	if h := c.roundHook.Load(); h != nil {
		(*h)(len(reqs))
	}
	c.rounds.Add(1)
	c.writers.Add(uint64(len(reqs)))
	readTs := db.lastTs.Load()
	rtxn := db.bdb.NewTransactionAt(readTs, false)
	defer rtxn.Discard()

	maxSize, maxCount := c.maxTxn()
	overlay := map[string]overlayEntry{}
	var chunks []*chunk
	cur := &chunk{}
	var conflicts int64
	for _, r := range reqs {
		if err := c.validate(rtxn, overlay, r.b); err != nil {
			if errors.Is(err, ErrConflict) {
				conflicts++
				c.conflicts.Add(1)
			}
			r.done <- result{err: err}
			continue
		}
		n := int64(len(r.b.Ops))
		if len(cur.reqs) > 0 && (cur.size+r.size >= maxSize || cur.count+n >= maxCount) {
			chunks = append(chunks, cur)
			cur = &chunk{}
		}
		cur.reqs = append(cur.reqs, r)
		cur.size += r.size
		cur.count += n
		for _, op := range r.b.Ops {
			overlay[string(op.Key)] = overlayEntry{deleted: op.Delete}
		}
	}
	if len(cur.reqs) > 0 {
		chunks = append(chunks, cur)
	}
	var failed error
	for _, ch := range chunks {
		if failed != nil {
			for _, r := range ch.reqs {
				r.done <- result{err: failed}
			}
			continue
		}
		ver, err := c.commitChunk(ch)
		if err != nil {
			failed = err
			for _, r := range ch.reqs {
				r.done <- result{err: err}
			}
			continue
		}
		c.committed.Add(uint64(len(ch.reqs)))
		for _, r := range ch.reqs {
			r.done <- result{ver: ver, writers: len(reqs)}
		}
	}
	// Let compactions drop versions no open snapshot can see any more.
	db.bdb.SetDiscardTs(db.discardTs())
	db.met.round(time.Since(start), len(reqs), len(chunks), conflicts, failed != nil)
}

// commitChunk writes one chunk in one Badger transaction at the next
// timestamp. A chunk whose writers have no ops commits nothing.
func (c *committer) commitChunk(ch *chunk) (Version, error) {
	db := c.db
	if ch.count == 0 {
		return Version(db.lastTs.Load()), nil
	}
	ts := db.lastTs.Load() + 1
	txn := db.bdb.NewTransactionAt(ts-1, true)
	defer txn.Discard()
	for _, r := range ch.reqs {
		for _, op := range r.b.Ops {
			var err error
			if op.Delete {
				err = txn.Delete(op.Key)
			} else {
				err = txn.Set(op.Key, op.Value)
			}
			if errors.Is(err, badger.ErrTxnTooBig) {
				return 0, fmt.Errorf("%w: a round's transaction of %d ops (about %d bytes) exceeded Badger's limit", ErrTooLarge, ch.count, ch.size)
			}
			if err != nil {
				return 0, fmt.Errorf("catalog: stage %q: %w", op.Key, err)
			}
		}
	}
	failpoint.Hit("catalog.before-commit")
	if err := txn.CommitAt(ts, nil); err != nil {
		return 0, fmt.Errorf("catalog: commit in %s: %w", displayDir(db.dir), err)
	}
	failpoint.Hit("catalog.after-commit")
	db.lastTs.Store(ts)
	c.txns.Add(1)
	return Version(ts), nil
}

// validate checks b's conditions against the store at the round's read
// timestamp and against the writes of earlier writers in the round.
func (c *committer) validate(rtxn *badger.Txn, overlay map[string]overlayEntry, b *Batch) error {
	for _, ch := range b.Checks {
		got, err := currentVersion(rtxn, overlay, ch.Key)
		if err != nil {
			return err
		}
		if err := CheckVersion(ch, got); err != nil {
			return err
		}
	}
	for _, rc := range b.RangeChecks {
		if err := checkRange(rtxn, overlay, rc); err != nil {
			return err
		}
	}
	return nil
}

func currentVersion(rtxn *badger.Txn, overlay map[string]overlayEntry, key []byte) (Version, error) {
	if o, ok := overlay[string(key)]; ok {
		if o.deleted {
			return 0, nil
		}
		return PendingVersion, nil
	}
	item, err := rtxn.Get(key)
	if errors.Is(err, badger.ErrKeyNotFound) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("catalog: check %q: %w", key, err)
	}
	return Version(item.Version()), nil
}

func checkRange(rtxn *badger.Txn, overlay map[string]overlayEntry, rc RangeCheck) error {
	now := map[string]Version{}
	err := scanTxn(context.Background(), rtxn, rc.Start, rc.End, false, func(k []byte, ver uint64, _ *badger.Item) error {
		now[string(k)] = Version(ver)
		return nil
	})
	if err != nil {
		return fmt.Errorf("catalog: range check [%q, %q): %w", rc.Start, rc.End, err)
	}
	for k, o := range overlay {
		if !InRange([]byte(k), rc.Start, rc.End) {
			continue
		}
		if o.deleted {
			delete(now, k)
		} else {
			now[k] = PendingVersion
		}
	}
	return CheckRangeSeen(rc, now)
}

// Limits are the sizes one record and one atomic commit can have.
type Limits struct {
	MaxKeySize   int   // largest key (max_key_size)
	MaxValueSize int   // largest value (max_value_size)
	MaxBatchSize int64 // one Batch's estimated size must stay below this
	MaxBatchOps  int64 // one Batch's op count must stay below this
}

// Limits returns the limits Commit enforces, so that a writer can refuse
// what can never be committed before it promises anything to its caller.
func (db *DB) Limits() Limits {
	size, count := db.c.maxTxn()
	return Limits{MaxKeySize: db.opts.MaxKeySize, MaxValueSize: db.opts.MaxValueSize, MaxBatchSize: size, MaxBatchOps: count}
}

// Limiter is implemented by stores that can tell their Limits (*DB does).
type Limiter interface {
	Limits() Limits
}

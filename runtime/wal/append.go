package wal

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/hostd-dev/hostd/runtime/catalog"
	"github.com/hostd-dev/hostd/runtime/failpoint"
)

// Part is one queue's share of an AppendMulti call.
type Part struct {
	Queue string
	Recs  []Record
	// Extra, if set, is called with the part's entries (offsets and ticks
	// assigned) while the batch is formed; its ops are committed atomically
	// with the entries. Callers write only under their own namespace (the
	// mapping stores producer idempotency state this way). It must be fast
	// and must not call the WAL.
	Extra func([]Entry) []catalog.Op
}

// PartError reports which part of a multi-part append failed before
// anything was committed (nothing of the call was appended). Queue names
// the part's queue (or, from a resolver, its vchannel). errors.Is sees the
// cause (ErrNoQueue, ErrSealed, ErrInvalid, ErrTooLarge, ErrNoChannel…).
type PartError struct {
	Index int
	Queue string
	Err   error
}

func (e *PartError) Error() string {
	return fmt.Sprintf("wal: part %d (%q): %v", e.Index, e.Queue, e.Err)
}

func (e *PartError) Unwrap() error { return e.Err }

// appendReq is one Append/AppendMulti call waiting for the group
// committer.
type appendReq struct {
	ctx     context.Context
	parts   []Part
	qs      []*queue
	n, size int
	state   int // 0 queued, 1 taken, 2 canceled
	lead    chan struct{}
	done    chan struct{}
	entries [][]Entry
	err     error
}

// Append appends recs to queue atomically (all or none) and returns their
// entries with consecutive offsets. Concurrent appends — to any queues —
// are grouped into one catalog commit; each caller gets its own result. On
// an error nothing of this call was appended — except when ctx ends after
// the call's batch was handed to the catalog, in which case Append waits
// for that commit's outcome rather than guess.
// Errors: ErrNoQueue, ErrSealed, ErrTooLarge, ErrInvalid, ErrClosed,
// ctx.Err(), or a wrapped catalog error.
func (w *WAL) Append(ctx context.Context, queue string, recs []Record) ([]Entry, error) {
	return w.AppendWith(ctx, queue, recs, nil)
}

// AppendWith is Append with extra catalog writes committed atomically with
// the entries (see Part.Extra).
func (w *WAL) AppendWith(ctx context.Context, queue string, recs []Record, extra func([]Entry) []catalog.Op) ([]Entry, error) {
	ents, err := w.appendTraced(ctx, []Part{{Queue: queue, Recs: recs, Extra: extra}})
	if err != nil {
		var pe *PartError
		if errors.As(err, &pe) {
			return nil, pe.Err
		}
		return nil, err
	}
	return ents[0], nil
}

// AppendMulti appends every part atomically: all parts' entries are
// committed in one catalog transaction, or none is. It returns the entries
// of each part, in the order of parts. A queue may appear in several
// parts; its entries are then assigned in part order. The whole call is
// bounded by MaxBatchBytes. A failure caused by one part (a sealed or
// missing queue, an invalid or oversized part) is a *PartError naming it.
// Errors as Append.
func (w *WAL) AppendMulti(ctx context.Context, parts []Part) ([][]Entry, error) {
	return w.appendTraced(ctx, parts)
}

func (w *WAL) appendTraced(ctx context.Context, parts []Part) ([][]Entry, error) {
	start := time.Now()
	recs := 0
	for _, p := range parts {
		recs += len(p.Recs)
	}
	var span trace.Span
	if len(parts) == 1 {
		ctx, span = w.tracer.Start(ctx, "wal.Append", trace.WithAttributes(
			attribute.String("hostd.wal.queue", parts[0].Queue), attribute.Int("hostd.wal.records", recs)))
	} else {
		ctx, span = w.tracer.Start(ctx, "wal.Append", trace.WithAttributes(
			attribute.Int("hostd.wal.queues", len(parts)), attribute.Int("hostd.wal.records", recs)))
	}
	defer span.End()
	ents, err := w.append(ctx, parts)
	if err != nil {
		w.mLatency.Record(ctx, time.Since(start).Seconds(), w.attrFailed)
		w.mFailures.Add(ctx, 1)
		span.RecordError(err)
		return nil, err
	}
	w.mLatency.Record(ctx, time.Since(start).Seconds(), w.attrOK)
	w.mAppends.Add(ctx, 1)
	w.mRecords.Add(ctx, int64(recs))
	if len(parts) == 1 && len(ents[0]) > 0 {
		span.SetAttributes(attribute.Int64("hostd.wal.first_offset", int64(ents[0][0].Offset)))
	}
	return ents, nil
}

// prepare validates parts and returns the request (not yet queued).
func (w *WAL) prepare(ctx context.Context, parts []Part) (*appendReq, error) {
	if len(parts) == 0 {
		return nil, fmt.Errorf("%w: no parts", ErrInvalid)
	}
	r := &appendReq{ctx: ctx, parts: parts, qs: make([]*queue, len(parts))}
	for i, p := range parts {
		if err := ValidateQueueName(p.Queue); err != nil {
			return nil, &PartError{Index: i, Queue: p.Queue, Err: err}
		}
		if len(p.Recs) == 0 {
			return nil, &PartError{Index: i, Queue: p.Queue, Err: fmt.Errorf("%w: empty batch", ErrInvalid)}
		}
		size := 0
		for j, rec := range p.Recs {
			if err := checkRecord(j, rec); err != nil {
				return nil, &PartError{Index: i, Queue: p.Queue, Err: err}
			}
			s := recordSize(rec)
			if s > w.cfg.MaxRecordBytes {
				return nil, &PartError{Index: i, Queue: p.Queue,
					Err: fmt.Errorf("%w: record %d is %d bytes, max %d", ErrTooLarge, j, s, w.cfg.MaxRecordBytes)}
			}
			size += s
		}
		if size > w.cfg.MaxBatchBytes {
			return nil, &PartError{Index: i, Queue: p.Queue,
				Err: fmt.Errorf("%w: batch is %d bytes, max %d", ErrTooLarge, size, w.cfg.MaxBatchBytes)}
		}
		r.n += len(p.Recs)
		r.size += size
	}
	if r.size > w.cfg.MaxBatchBytes {
		return nil, fmt.Errorf("%w: %d parts are %d bytes together, max %d", ErrTooLarge, len(parts), r.size, w.cfg.MaxBatchBytes)
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	for i, p := range parts {
		q, err := w.q(p.Queue)
		if err != nil {
			return nil, err
		}
		r.qs[i] = q
	}
	return r, nil
}

func (w *WAL) append(ctx context.Context, parts []Part) ([][]Entry, error) {
	r, err := w.prepare(ctx, parts)
	if err != nil {
		return nil, err
	}
	r.lead, r.done = make(chan struct{}, 1), make(chan struct{})
	w.amu.Lock()
	w.apending = append(w.apending, r)
	if !w.arunning {
		w.arunning = true
		w.amu.Unlock()
		w.lead(r)
		return r.entries, r.err
	}
	w.amu.Unlock()
	select {
	case <-r.done:
		return r.entries, r.err
	case <-r.lead:
		w.lead(r)
		return r.entries, r.err
	case <-ctx.Done():
	}
	w.amu.Lock()
	if r.state == 0 {
		r.state = 2
		w.removeLocked(r)
		select {
		case <-r.lead: // leadership was handed to us: pass it on
			w.handoffLocked()
		default:
		}
		w.amu.Unlock()
		return nil, ctx.Err()
	}
	w.amu.Unlock()
	// Taken by a leader: the outcome is decided by its commit.
	select {
	case <-r.done:
	case <-r.lead:
		w.lead(r)
	}
	return r.entries, r.err
}

func (w *WAL) removeLocked(r *appendReq) {
	for i, p := range w.apending {
		if p == r {
			w.apending = append(w.apending[:i], w.apending[i+1:]...)
			return
		}
	}
}

// handoffLocked passes leadership to the oldest queued request, or marks
// the committer idle.
func (w *WAL) handoffLocked() {
	if len(w.apending) == 0 {
		w.arunning = false
		return
	}
	w.apending[0].lead <- struct{}{}
}

// ops estimates the catalog entries r's part of a commit takes: a put per
// record, and a meta put and a version check per queue.
func (r *appendReq) ops() int { return r.n + 2*len(r.qs) }

// lead runs grouped commits until r is done, then hands leadership on.
func (w *WAL) lead(r *appendReq) {
	for {
		select {
		case <-r.done:
			w.amu.Lock()
			w.handoffLocked()
			w.amu.Unlock()
			return
		default:
		}
		w.commitRound(r.ctx)
	}
}

// commitRound takes queued requests (whole calls, within the batch
// limits; the first is always taken), assigns offsets and ticks, and
// commits them as one catalog batch.
func (w *WAL) commitRound(ctx context.Context) {
	w.amu.Lock()
	var batch []*appendReq
	n, size, ops := 0, 0, 0
	i := 0
	for ; i < len(w.apending); i++ {
		p := w.apending[i]
		pops := p.ops()
		if len(batch) > 0 && (n+p.n > w.cfg.MaxBatchRecords || size+p.size > w.cfg.MaxBatchBytes ||
			(w.maxOps > 0 && ops+pops > w.maxOps)) {
			break
		}
		p.state = 1
		batch = append(batch, p)
		n += p.n
		size += p.size
		ops += pops
	}
	w.apending = append(w.apending[:0], w.apending[i:]...)
	w.amu.Unlock()
	if len(batch) == 0 {
		return
	}
	cctx := context.WithoutCancel(ctx)
	var err error
	for attempt := 0; attempt < 3; attempt++ {
		batch, err = w.tryCommit(cctx, batch)
		if err == nil || !errors.Is(err, catalog.ErrConflict) {
			break
		}
	}
	if err != nil {
		for _, p := range batch {
			p.entries = nil
			if len(p.parts) == 1 {
				p.err = fmt.Errorf("wal: append to %q: %w", p.parts[0].Queue, err)
			} else {
				p.err = fmt.Errorf("wal: append to %d queues: %w", len(p.parts), err)
			}
			close(p.done)
		}
		return
	}
	recs := 0
	for _, p := range batch {
		recs += p.n
		close(p.done)
	}
	if recs > 0 {
		w.mBatch.Record(cctx, int64(recs))
	}
}

// qstate is one queue's meta during a commit attempt.
type qstate struct {
	q    *queue
	m    meta // working copy: advanced as entries are assigned
	ver  catalog.Version
	err  error
	used bool
}

// tryCommit commits the requests of batch that can be (a request naming a
// missing or sealed queue fails alone, at once) and returns those still in
// the commit, whose outcome is err.
func (w *WAL) tryCommit(ctx context.Context, batch []*appendReq) ([]*appendReq, error) {
	states := map[*queue]*qstate{}
	var unloaded []*qstate
	for _, p := range batch {
		for _, q := range p.qs {
			if states[q] != nil {
				continue
			}
			st := &qstate{q: q}
			q.mu.Lock()
			if q.loaded {
				st.m, st.ver = q.m, q.ver
			} else {
				unloaded = append(unloaded, st)
			}
			q.mu.Unlock()
			states[q] = st
		}
	}
	if len(unloaded) > 0 {
		err := w.store.View(ctx, func(r catalog.Reader) error {
			for _, st := range unloaded {
				st.m, st.ver, st.err = readMeta(r, st.q.name)
				if st.err != nil && !errors.Is(st.err, ErrNoQueue) {
					return st.err
				}
			}
			return nil
		})
		if err != nil {
			return batch, err
		}
		for _, st := range unloaded {
			if st.err != nil {
				continue
			}
			st.q.mu.Lock()
			st.q.loaded, st.q.m, st.q.ver = true, st.m, st.ver
			st.q.mu.Unlock()
		}
	}
	live := make([]*appendReq, 0, len(batch))
	n := 0
	for _, p := range batch {
		var perr error
		for i, q := range p.qs {
			st := states[q]
			switch {
			case st.err != nil:
				perr = &PartError{Index: i, Queue: q.name, Err: st.err}
			case st.m.state == stateSealed:
				perr = &PartError{Index: i, Queue: q.name, Err: fmt.Errorf("%w: %q at offset %d", ErrSealed, q.name, st.m.next)}
			}
			if perr != nil {
				break
			}
		}
		if perr != nil {
			p.entries, p.err = nil, perr
			close(p.done)
			continue
		}
		live = append(live, p)
		n += p.n
	}
	if len(live) == 0 {
		return nil, nil
	}
	tick := w.ticks.next(n)
	ops := make([]catalog.Op, 0, n+len(states))
	for _, p := range live {
		p.entries = make([][]Entry, len(p.parts))
		for i, part := range p.parts {
			st := states[p.qs[i]]
			st.used = true
			ents := make([]Entry, len(part.Recs))
			for j, rec := range part.Recs {
				ops = append(ops, catalog.Op{Key: entryKey(st.q.name, st.m.next), Value: encodeEntry(tick, st.m.bytes, rec)})
				ents[j] = Entry{Offset: st.m.next, Tick: tick, Payload: rec.Payload, Props: rec.Props, Kind: rec.Kind, ID: rec.ID}
				st.m.bytes += uint64(recordSize(rec))
				st.m.lastTick = tick
				st.m.next++
				tick++
			}
			if part.Extra != nil {
				ops = append(ops, part.Extra(ents)...)
			}
			p.entries[i] = ents
		}
	}
	used := make([]*qstate, 0, len(states))
	for _, st := range states {
		if st.used {
			used = append(used, st)
		}
	}
	sort.Slice(used, func(i, j int) bool { return used[i].q.name < used[j].q.name })
	checks := make([]catalog.Check, len(used))
	for i, st := range used {
		checks[i] = catalog.Check{Key: metaKey(st.q.name), Version: st.ver}
		ops = append(ops, catalog.Op{Key: metaKey(st.q.name), Value: st.m.encode()})
	}
	failpoint.Hit("wal.before-commit")
	nv, err := w.store.Commit(ctx, &catalog.Batch{Checks: checks, Ops: ops})
	if err != nil {
		for _, st := range used {
			st.q.mu.Lock()
			st.q.loaded = false
			st.q.mu.Unlock()
		}
		for _, p := range live {
			p.entries = nil
		}
		return live, err
	}
	failpoint.Hit("wal.after-commit")
	for _, st := range used {
		q := st.q
		q.mu.Lock()
		if q.loaded && q.ver == st.ver {
			q.m, q.ver = st.m, nv
		} else {
			q.loaded = false
		}
		close(q.notify)
		q.notify = make(chan struct{})
		q.mu.Unlock()
	}
	return live, nil
}

// NextHint returns a lower bound of the offset queue will assign next,
// from memory when the queue's state is cached (exact unless an append is
// committing right now), else from the catalog. The broadcast engine uses
// it as a recovery low-water mark, where any lower bound is correct.
// Errors: ErrNoQueue, ErrClosed.
func (w *WAL) NextHint(ctx context.Context, queue string) (uint64, error) {
	q, err := w.q(queue)
	if err != nil {
		return 0, err
	}
	q.mu.Lock()
	loaded, m := q.loaded, q.m
	q.mu.Unlock()
	if loaded {
		if m.state == stateDeleting {
			return 0, noQueue(queue)
		}
		return m.next, nil
	}
	b, err := w.Bounds(ctx, queue)
	return b.Max, err
}

package broadcast

import (
	"context"
	"fmt"
	"sync"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/hostd-dev/hostd/runtime/catalog"
	"github.com/hostd-dev/hostd/runtime/failpoint"
)

// appendReq is one append attempt of one vchannel of one task.
type appendReq struct {
	t       *task
	entry   AppendEntry
	attempt int
	epoch   int
	span    trace.Span
	results chan<- appendResult
}

// appendLoop batches the append attempts of every task: one
// Channels.Append per round, all queued attempts together. A task's
// attempts arrive as one message, so its vchannels share a round.
func (e *Engine) appendLoop() {
	defer e.wg.Done()
	for {
		var batch []*appendReq
		select {
		case rs := <-e.appendCh:
			batch = append(batch, rs...)
		case <-e.ctx.Done():
			e.drainAppends()
			return
		}
	drain:
		for len(batch) < e.o.AppendBatch {
			select {
			case rs := <-e.appendCh:
				batch = append(batch, rs...)
			default:
				break drain
			}
		}
		e.appendRound(batch)
	}
}

func (e *Engine) drainAppends() {
	for {
		select {
		case rs := <-e.appendCh:
			for _, r := range rs {
				r.span.End()
			}
		default:
			return
		}
	}
}

func (e *Engine) appendRound(batch []*appendReq) {
	entries := make([]AppendEntry, len(batch))
	for i, r := range batch {
		entries[i] = r.entry
	}
	t0 := e.o.Clock.Now()
	ctx, round := e.roundSpan(batch, len(entries))
	defer round.End()
	var fresh []*task // tasks whose PENDING record is not durable yet
	seen := map[*task]bool{}
	for _, r := range batch {
		if seen[r.t] {
			continue
		}
		seen[r.t] = true
		r.t.mu.Lock()
		if r.t.persistOps != nil {
			fresh = append(fresh, r.t)
		}
		r.t.mu.Unlock()
	}
	var outs []AppendOutcome
	var err error
	if len(fresh) > 0 {
		outs, err = e.appendPersisting(ctx, batch, entries, fresh)
	} else {
		outs, err = e.safeAppend(ctx, entries)
	}
	e.m.appendDuration.Record(context.Background(), e.o.Clock.Now().Sub(t0).Seconds())
	if err == nil && len(outs) != len(entries) {
		err = fmt.Errorf("broadcast: channels returned %d outcomes for %d entries", len(outs), len(entries))
	}
	if err != nil {
		outs = make([]AppendOutcome, len(entries))
		for i := range outs {
			outs[i].Err = err
		}
		round.RecordError(err)
		round.SetStatus(codes.Error, err.Error())
	}
	cps := make([]cpRecord, len(batch))
	for i, r := range batch {
		if outs[i].Err != nil {
			continue
		}
		cp := outs[i].Checkpoint
		cp.VChannel = r.entry.VChannel
		cps[i] = cpRecord{Checkpoint: cp, Attempts: r.attempt, Epoch: r.epoch}
	}
	// The entries are in the log; their checkpoints reach the catalog with
	// each task's next write. A crash before that is covered by recovery
	// (it reads each vchannel from the task's low-water mark).
	failpoint.Hit("broadcast.mid-append")
	for i, r := range batch {
		t, vc := r.t, r.entry.VChannel
		if err := outs[i].Err; err != nil {
			r.span.RecordError(err)
			r.span.SetStatus(codes.Error, err.Error())
			r.span.End()
			e.m.appendFailures.Add(context.Background(), 1)
			t.mu.Lock()
			t.appendErrs[vc] = err.Error()
			t.mu.Unlock()
			r.results <- appendResult{vc: vc, out: outs[i]}
			continue
		}
		r.span.End()
		t.mu.Lock()
		t.cps[vc] = cps[i]
		delete(t.appendErrs, vc)
		if t.allAppendedLocked() {
			select {
			case <-t.appended:
			default:
				close(t.appended)
			}
		}
		t.mu.Unlock()
		r.results <- appendResult{vc: vc, out: AppendOutcome{Checkpoint: cps[i].Checkpoint}}
	}
}

// appendPersisting appends entries and persists the PENDING records of
// fresh in the same catalog transaction when the channels can
// (AtomicAppender): one durable write, and an append never exists without
// its task. Otherwise — or when that combined commit fails, e.g. because
// one vchannel is sealed — the records are committed first, on their own,
// and the entries appended as usual. If that commit fails, the fresh
// tasks' entries fail (their retries persist first again); the other
// entries are appended.
func (e *Engine) appendPersisting(ctx context.Context, batch []*appendReq, entries []AppendEntry, fresh []*task) ([]AppendOutcome, error) {
	var extra []catalog.Op
	for _, t := range fresh {
		t.mu.Lock()
		extra = append(extra, t.persistOps...)
		t.mu.Unlock()
	}
	if aa, ok := e.o.Channels.(AtomicAppender); ok {
		outs, err := e.safeAppendAtomic(ctx, aa, entries, extra)
		committed := false
		if err == nil && len(outs) == len(entries) {
			for _, o := range outs {
				if o.Err == nil {
					committed = true
					break
				}
			}
		}
		if committed {
			e.markPersisted(fresh)
			return outs, nil
		}
		if err == nil && len(outs) == len(entries) && len(outs) > 0 {
			e.log.Debug("combined persist+append failed; persisting first", "tasks", len(fresh), "err", outs[0].Err)
		}
	}
	_, perr := e.o.Store.Commit(ctx, &catalog.Batch{Ops: extra})
	if perr == nil {
		e.markPersisted(fresh)
		return e.safeAppend(ctx, entries)
	}
	// The records together failed: commit each on its own (concurrently,
	// the committer groups them), so that one record that can never fit
	// does not hold back the others; a task whose own record fails for
	// good is dropped (never appended, never answered with an ID).
	failed := e.persistEach(ctx, fresh)
	outs := make([]AppendOutcome, len(entries))
	var rest []AppendEntry
	var restIdx []int
	for i, r := range batch {
		if err := failed[r.t]; err != nil {
			outs[i].Err = err
			continue
		}
		rest = append(rest, entries[i])
		restIdx = append(restIdx, i)
	}
	if len(rest) == 0 {
		return outs, nil
	}
	ro, err := e.safeAppend(ctx, rest)
	if err == nil && len(ro) != len(rest) {
		err = fmt.Errorf("broadcast: channels returned %d outcomes for %d entries", len(ro), len(rest))
	}
	for j, i := range restIdx {
		if err != nil {
			outs[i].Err = err
		} else {
			outs[i] = ro[j]
		}
	}
	return outs, nil
}

// safeAppendAtomic calls AppendAtomic, turning a panic into an error.
func (e *Engine) safeAppendAtomic(ctx context.Context, aa AtomicAppender, entries []AppendEntry, extra []catalog.Op) (outs []AppendOutcome, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("broadcast: channels append panicked: %v", r)
		}
	}()
	return aa.AppendAtomic(ctx, entries, extra)
}

// maxRoundLinks bounds the links of one `append round` span.
const maxRoundLinks = 128

// roundSpan starts the `append round` span of one batch: a root (a round
// carries entries of many broadcasts, so it belongs to none of their
// traces) linked to every `send` span in it, each of which links back, so
// `hostd trace show <broadcast>` names the round and the round's trace
// holds the mapping.append / wal.Append spans of its commit.
func (e *Engine) roundSpan(batch []*appendReq, entries int) (context.Context, trace.Span) {
	links := make([]trace.Link, 0, min(len(batch), maxRoundLinks))
	tasks := map[*task]bool{}
	for _, r := range batch {
		tasks[r.t] = true
		if sc := r.span.SpanContext(); sc.IsValid() && len(links) < maxRoundLinks {
			links = append(links, trace.Link{SpanContext: sc})
		}
	}
	ctx, sp := e.tracer.Start(e.ctx, "append round", trace.WithNewRoot(), trace.WithLinks(links...),
		trace.WithAttributes(attribute.Int("hostd.append.entries", entries), attribute.Int("hostd.append.broadcasts", len(tasks))))
	if sc := sp.SpanContext(); sc.IsValid() {
		for _, r := range batch {
			r.span.AddLink(trace.Link{SpanContext: sc})
		}
	}
	return ctx, sp
}

// safeAppend calls Channels.Append, turning a panic into an error.
func (e *Engine) safeAppend(ctx context.Context, entries []AppendEntry) (outs []AppendOutcome, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("broadcast: channels append panicked: %v", r)
		}
	}()
	return e.o.Channels.Append(ctx, entries)
}

// persistEach commits the PENDING record of each task on its own and
// returns the error of each task that failed (wrapping errDropped when the
// failure is permanent: the task's driver then drops it).
func (e *Engine) persistEach(ctx context.Context, fresh []*task) map[*task]error {
	errs := make([]error, len(fresh))
	var wg sync.WaitGroup
	for i, t := range fresh {
		t.mu.Lock()
		ops := t.persistOps
		t.mu.Unlock()
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errs[i] = e.o.Store.Commit(ctx, &catalog.Batch{Ops: ops})
		}()
	}
	wg.Wait()
	var ok []*task
	failed := map[*task]error{}
	for i, t := range fresh {
		err := errs[i]
		if err == nil {
			ok = append(ok, t)
			continue
		}
		err = fmt.Errorf("broadcast: persist task %d: %w", t.tid, err)
		if permanentCommitError(err) && ctx.Err() == nil {
			t.mu.Lock()
			t.dropErr = err
			t.mu.Unlock()
			err = fmt.Errorf("%w: %w", errDropped, err)
		}
		failed[t] = err
	}
	e.markPersisted(ok)
	return failed
}

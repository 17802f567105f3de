package broadcast

import (
	"context"
	"fmt"
	"strconv"

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

// appendLoop batches the append attempts of every task: one Channels.Append
// per round, then one catalog Commit with every checkpoint and high-water
// mark of the round, before the next round starts (see package doc: that
// order is what lets recovery find appends whose checkpoints were lost).
func (e *Engine) appendLoop() {
	defer e.wg.Done()
	for {
		var batch []*appendReq
		select {
		case r := <-e.appendCh:
			batch = append(batch, r)
		case <-e.ctx.Done():
			e.drainAppends()
			return
		}
	drain:
		for len(batch) < e.o.AppendBatch {
			select {
			case r := <-e.appendCh:
				batch = append(batch, r)
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
		case r := <-e.appendCh:
			r.span.End()
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
	outs, err := e.safeAppend(entries)
	if err == nil && len(outs) != len(entries) {
		err = fmt.Errorf("broadcast: channels returned %d outcomes for %d entries", len(outs), len(entries))
	}
	if err != nil {
		outs = make([]AppendOutcome, len(entries))
		for i := range outs {
			outs[i].Err = err
		}
	}
	var ops []catalog.Op
	hw := map[string]uint64{}
	cps := make([]cpRecord, len(batch))
	for i, r := range batch {
		if outs[i].Err != nil {
			continue
		}
		cp := outs[i].Checkpoint
		cp.VChannel = r.entry.VChannel
		cps[i] = cpRecord{Checkpoint: cp, Attempts: r.attempt, Epoch: r.epoch}
		ops = append(ops, catalog.Op{Key: cpKey(r.t.tid, cp.VChannel), Value: mustJSON(&cps[i])})
		if cur, ok := hw[cp.VChannel]; !ok || cp.Offset > cur {
			hw[cp.VChannel] = cp.Offset
		}
	}
	if len(ops) > 0 {
		failpoint.Hit("broadcast.mid-append")
		for vc, off := range hw {
			ops = append(ops, catalog.Op{Key: hwKey(vc), Value: []byte(strconv.FormatUint(off, 10))})
		}
		// Entries are in the log now: their checkpoints must be committed
		// before anything else is appended, so retry until that works.
		for n := 1; ; n++ {
			_, cerr := e.o.Store.Commit(e.ctx, &catalog.Batch{Ops: ops})
			if cerr == nil {
				break
			}
			if e.ctx.Err() != nil {
				for _, r := range batch {
					r.span.End()
				}
				return
			}
			e.log.Warn("commit append checkpoints failed; retrying", "entries", len(ops), "err", cerr)
			select {
			case <-e.o.Clock.After(backoff(n)):
			case <-e.ctx.Done():
				for _, r := range batch {
					r.span.End()
				}
				return
			}
		}
	}
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

// safeAppend calls Channels.Append, turning a panic into an error.
func (e *Engine) safeAppend(entries []AppendEntry) (outs []AppendOutcome, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("broadcast: channels append panicked: %v", r)
		}
	}()
	return e.o.Channels.Append(e.ctx, entries)
}

package broadcast

import (
	"context"
	"fmt"

	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

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
// Channels.Append per round, all queued attempts together.
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
	t0 := e.o.Clock.Now()
	outs, err := e.safeAppend(entries)
	e.m.appendDuration.Record(context.Background(), e.o.Clock.Now().Sub(t0).Seconds())
	if err == nil && len(outs) != len(entries) {
		err = fmt.Errorf("broadcast: channels returned %d outcomes for %d entries", len(outs), len(entries))
	}
	if err != nil {
		outs = make([]AppendOutcome, len(entries))
		for i := range outs {
			outs[i].Err = err
		}
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

// safeAppend calls Channels.Append, turning a panic into an error.
func (e *Engine) safeAppend(entries []AppendEntry) (outs []AppendOutcome, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("broadcast: channels append panicked: %v", r)
		}
	}()
	return e.o.Channels.Append(e.ctx, entries)
}

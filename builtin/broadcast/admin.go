package broadcast

import (
	"context"
	"fmt"
	"sort"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/hostd-dev/hostd/runtime/catalog"
)

func (e *Engine) get(id uint64) (*task, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	t := e.tasks[id]
	if t == nil {
		return nil, fmt.Errorf("%w: %d", ErrNotFound, id)
	}
	return t, nil
}

// Ack records a consumer's ack of vchannel for task id (AckSyncUp).
// Acks are idempotent; an ack of a finished task is a no-op; the control
// channel and FastAck tasks are acked by the host, so acking them is a
// no-op too. Errors: ErrNotFound (unknown task), ErrUnknownVChannel (not a
// target of the task), ErrNotAckable (not appended yet).
func (e *Engine) Ack(ctx context.Context, id uint64, vchannel string) error {
	t, err := e.get(id)
	if err != nil {
		return err
	}
	t.mu.Lock()
	if t.rec.State.Finished() {
		t.mu.Unlock()
		return nil
	}
	found := false
	for _, vc := range t.rec.VChannels {
		found = found || vc == vchannel
	}
	if !found {
		t.mu.Unlock()
		return fmt.Errorf("%w: %q is not a target of broadcast %d", ErrUnknownVChannel, vchannel, id)
	}
	if vchannel == ControlChannel || !t.rec.AckSyncUp || t.acks[vchannel] {
		t.mu.Unlock()
		return nil
	}
	if _, ok := t.cps[vchannel]; !ok {
		t.mu.Unlock()
		return fmt.Errorf("%w: broadcast %d is not appended to %q yet", ErrNotAckable, id, vchannel)
	}
	t.mu.Unlock()
	if _, err := e.o.Store.Commit(ctx, &catalog.Batch{Ops: []catalog.Op{{Key: ackKey(id, vchannel), Value: []byte("1")}}}); err != nil {
		return fmt.Errorf("broadcast: persist ack %d/%s: %w", id, vchannel, err)
	}
	t.mu.Lock()
	t.acks[vchannel] = true
	t.mu.Unlock()
	select {
	case t.wake <- struct{}{}:
	default:
	}
	return nil
}

// Abandon moves a PENDING task to FAILED, recording who and why; its locks
// are released and waiters get the FAILED state. Errors: ErrNotFound,
// ErrInvalidState (not PENDING).
func (e *Engine) Abandon(ctx context.Context, id uint64, by, reason string) (*TaskInfo, error) {
	t, err := e.get(id)
	if err != nil {
		return nil, err
	}
	t.mu.Lock()
	if t.rec.State != StatePending {
		st := t.rec.State
		t.mu.Unlock()
		return nil, fmt.Errorf("%w: broadcast %d is %s, only PENDING can be abandoned", ErrInvalidState, id, st)
	}
	cancel, exited := t.cancel, t.exited
	t.mu.Unlock()
	if cancel != nil {
		cancel(errAbandoned) // interrupts a waiting or running callback
		select {
		case <-exited:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	t.mu.Lock()
	if t.rec.State != StatePending {
		st := t.rec.State
		t.mu.Unlock()
		return nil, fmt.Errorf("%w: broadcast %d became %s", ErrInvalidState, id, st)
	}
	now := e.o.Clock.Now()
	rec := t.rec
	rec.State = StateFailed
	rec.FinishedAt = &now
	rec.NextRetry = nil
	by, reason = clipJSON(by, maxStoredNote), clipJSON(reason, maxStoredNote)
	rec.Abandoned = &Abandon{By: by, Reason: reason, At: now}
	rec.LastError = clipJSON(fmt.Sprintf("abandoned by %s: %s", by, reason), maxStoredError)
	cpOps, cpVCs := t.unsavedLocked()
	t.mu.Unlock()
	if _, err := e.o.Store.Commit(ctx, &catalog.Batch{Ops: append(cpOps, catalog.Op{Key: taskKey(id), Value: mustJSON(&rec)})}); err != nil {
		e.restart(t)
		return nil, fmt.Errorf("broadcast: persist abandon of %d: %w", id, err)
	}
	t.markSaved(cpVCs)
	e.finish(t, rec)
	return e.Get(id)
}

// restart starts a task's driver again (after a failed abandon).
func (e *Engine) restart(t *task) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if !e.closed {
		e.startDriver(t)
	}
}

// Retry re-runs a FAILED task: it first takes the task's resource keys
// again (blocking on ctx, like a new broadcast), then saves it as PENDING
// with a new control-channel append (a new callback order), and resumes
// it. The attempt budget restarts; hostd.attempt keeps counting.
// Errors: ErrNotFound, ErrInvalidState (not FAILED), lock/ctx errors.
func (e *Engine) Retry(ctx context.Context, id uint64) (*TaskInfo, error) {
	t, err := e.get(id)
	if err != nil {
		return nil, err
	}
	t.mu.Lock()
	if t.rec.State != StateFailed {
		st := t.rec.State
		t.mu.Unlock()
		return nil, fmt.Errorf("%w: broadcast %d is %s, only FAILED can be retried", ErrInvalidState, id, st)
	}
	keys, exited := t.rec.Keys, t.exited
	t.mu.Unlock()
	if exited != nil {
		<-exited
	}
	lw := e.addLockWait(id, t.typ, keys)
	guard, err := e.o.Locker.Lock(ctx, keys)
	if err != nil {
		err = e.lockWaitError(lw, err)
	}
	e.removeLockWait(lw)
	if err != nil {
		return nil, err
	}
	// Appends that finished after the task failed may have no checkpoint
	// in the catalog: find them, so they are not appended again.
	if err := e.findLostAppends(ctx, []*task{t}); err != nil {
		guard.Release()
		return nil, err
	}
	ctlNext, err := e.o.Channels.Next(ctx, ControlChannel)
	if err != nil {
		guard.Release()
		return nil, err
	}
	e.gcMu.Lock()
	defer e.gcMu.Unlock()
	e.mu.Lock()
	gone := e.tasks[id] != t
	e.mu.Unlock()
	t.mu.Lock()
	if gone || t.rec.State != StateFailed {
		t.mu.Unlock()
		guard.Release()
		return nil, fmt.Errorf("%w: broadcast %d changed while waiting for its locks", ErrInvalidState, id)
	}
	rec := t.rec
	rec.State = StatePending
	rec.Epoch++
	rec.AttemptBase = rec.Attempts
	rec.FinishedAt, rec.Abandoned, rec.NextRetry = nil, nil, nil
	rec.LastError = ""
	low := make(map[string]uint64, len(rec.LowWater)+1)
	for k, v := range rec.LowWater {
		low[k] = v
	}
	low[ControlChannel] = ctlNext
	rec.LowWater = low
	delete(t.cps, ControlChannel) // the new epoch appends it again
	delete(t.cpSaved, ControlChannel)
	cpOps, cpVCs := t.unsavedLocked()
	t.mu.Unlock()
	b := &catalog.Batch{Ops: append(cpOps,
		catalog.Op{Key: taskKey(id), Value: mustJSON(&rec)},
		catalog.Op{Key: cpKey(id, ControlChannel), Delete: true},
	)}
	if _, err := e.o.Store.Commit(ctx, b); err != nil {
		guard.Release()
		return nil, fmt.Errorf("broadcast: persist retry of %d: %w", id, err)
	}
	t.markSaved(cpVCs)
	e.mu.Lock()
	t.mu.Lock()
	t.rec = rec
	t.guard = guard
	t.done = make(chan struct{})
	t.appended = make(chan struct{})
	t.started = e.o.Clock.Now()
	t.recovered = false
	t.mu.Unlock()
	e.byState[StateFailed]--
	e.byState[StatePending]++
	if !e.closed {
		e.startDriver(t)
	}
	e.mu.Unlock()
	return e.Get(id)
}

// Get returns the full state of task id (ErrNotFound if unknown or GC'd).
func (e *Engine) Get(id uint64) (*TaskInfo, error) {
	t, err := e.get(id)
	if err != nil {
		return nil, err
	}
	return t.info(), nil
}

func (t *task) info() *TaskInfo {
	t.mu.Lock()
	defer t.mu.Unlock()
	r := &t.rec
	in := &TaskInfo{
		ID: r.ID, State: r.State, Message: r.Message, ResourceKeys: r.Keys,
		IdempotencyKey: r.IdemKey, Scope: r.Scope, AckSyncUp: r.AckSyncUp,
		Attempts: r.Attempts, Conflicts: r.Conflicts, LastError: r.LastError, NextRetry: r.NextRetry,
		CreatedAt: r.CreatedAt, FinishedAt: r.FinishedAt, Abandoned: r.Abandoned,
	}
	if sc := trace.SpanContextFromContext(t.parentContext()); sc.IsValid() {
		in.TraceID = sc.TraceID().String()
	}
	for _, vc := range r.VChannels {
		st := VChannelStatus{Name: vc, Attempts: t.appendAttempts[vc], LastError: t.appendErrs[vc]}
		if cp, ok := t.cps[vc]; ok {
			c := cp.Checkpoint
			st.Checkpoint = &c
			st.Acked = vc == ControlChannel || !r.AckSyncUp || t.acks[vc]
			if cp.Attempts > st.Attempts {
				st.Attempts = cp.Attempts
			}
		}
		if r.State == StateTombstone {
			st.Acked = true
		}
		in.VChannels = append(in.VChannels, st)
	}
	if r.State == StatePending {
		in.MissingAcks = t.missingAcksLocked()
	}
	return in
}

// List returns tasks matching f in ID order, and the ID to pass as
// f.After for the next page (0 when done).
func (e *Engine) List(f Filter) ([]TaskInfo, uint64) {
	e.mu.Lock()
	ids := make([]uint64, 0, len(e.tasks))
	for id := range e.tasks {
		if id > f.After {
			ids = append(ids, id)
		}
	}
	tasks := make(map[uint64]*task, len(ids))
	for _, id := range ids {
		tasks[id] = e.tasks[id]
	}
	e.mu.Unlock()
	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	var out []TaskInfo
	for _, id := range ids {
		in := tasks[id].info()
		if f.State != "" && in.State != f.State {
			continue
		}
		if f.Type != "" && in.Message.Type != f.Type {
			continue
		}
		if f.Limit > 0 && len(out) == f.Limit {
			return out, out[len(out)-1].ID
		}
		out = append(out, *in)
	}
	return out, 0
}

// Counts returns the number of tasks per state.
func (e *Engine) Counts() map[State]int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return map[State]int{StatePending: e.byState[StatePending], StateTombstone: e.byState[StateTombstone], StateFailed: e.byState[StateFailed]}
}

// Close stops the engine: drivers and loops end, in-flight work stays
// persisted and resumes at the next Start, locks held by PENDING tasks are
// released (they are re-taken by the next Start). Idempotent.
func (e *Engine) Close() error {
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		return nil
	}
	e.closed = true
	e.mu.Unlock()
	e.cancel(errShuttingDown) // interrupts running callbacks
	e.wg.Wait()
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, t := range e.tasks {
		t.mu.Lock()
		g := t.guard
		t.guard = nil
		t.mu.Unlock()
		if g != nil {
			g.Release()
		}
	}
	return nil
}

// ---- GC ----

func (e *Engine) gcLoop() {
	defer e.wg.Done()
	for {
		select {
		case <-e.o.Clock.After(e.o.CheckInterval):
		case <-e.gcKick:
		case <-e.ctx.Done():
			return
		}
		if err := e.gc(e.ctx); err != nil && e.ctx.Err() == nil {
			e.log.Warn("broadcast GC failed", "err", err)
		}
	}
}

// GC removes finished tasks older than MaxLifetime or beyond MaxCount
// (oldest first). It runs every CheckInterval and at Start; tests and
// admins may call it directly.
func (e *Engine) GC(ctx context.Context) error { return e.gc(ctx) }

func (e *Engine) gc(ctx context.Context) error {
	e.gcMu.Lock()
	defer e.gcMu.Unlock()
	now := e.o.Clock.Now()
	type fin struct {
		t  *task
		at time.Time
	}
	var done []fin
	e.mu.Lock()
	for _, t := range e.tasks {
		t.mu.Lock()
		if t.rec.State.Finished() && t.rec.FinishedAt != nil {
			done = append(done, fin{t, *t.rec.FinishedAt})
		}
		t.mu.Unlock()
	}
	e.mu.Unlock()
	sort.Slice(done, func(i, j int) bool {
		if !done[i].at.Equal(done[j].at) {
			return done[i].at.Before(done[j].at)
		}
		return done[i].t.rec.ID < done[j].t.rec.ID
	})
	var victims []*task
	for i, f := range done {
		if now.Sub(f.at) > e.o.MaxLifetime || len(done)-i > e.o.MaxCount {
			victims = append(victims, f.t)
		}
	}
	// One commit deletes up to 128 tasks and about gcChunkOps keys (a task
	// with 1,024 vchannels has 2,049 keys): Badger bounds the ops of one
	// transaction.
	const chunk, gcChunkOps = 128, 4096
	for len(victims) > 0 {
		n, nops := 0, 0
		for n < len(victims) && n < chunk && (n == 0 || nops+1+2*len(victims[n].rec.VChannels) <= gcChunkOps) {
			nops += 1 + 2*len(victims[n].rec.VChannels)
			n++
		}
		part := victims[:n]
		victims = victims[n:]
		var ops []catalog.Op
		for _, t := range part {
			ops = append(ops, catalog.Op{Key: taskKey(t.rec.ID), Delete: true})
			for _, vc := range t.rec.VChannels {
				ops = append(ops, catalog.Op{Key: cpKey(t.rec.ID, vc), Delete: true}, catalog.Op{Key: ackKey(t.rec.ID, vc), Delete: true})
			}
		}
		if _, err := e.o.Store.Commit(ctx, &catalog.Batch{Ops: ops}); err != nil {
			return fmt.Errorf("broadcast: gc: %w", err)
		}
		e.mu.Lock()
		for _, t := range part {
			delete(e.tasks, t.rec.ID)
			e.byState[t.rec.State]--
			if t.rec.IdemKey != "" {
				ik := idemIndexKey(t.rec.Message.Type, t.rec.Scope, t.rec.IdemKey)
				if ent := e.index[ik]; ent != nil && ent.task == t {
					delete(e.index, ik)
				}
			}
		}
		e.mu.Unlock()
	}
	return nil
}

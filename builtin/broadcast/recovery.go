package broadcast

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strconv"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/hostd-dev/hostd/runtime/catalog"
	"github.com/hostd-dev/hostd/runtime/wal"
	"github.com/hostd-dev/hostd/sdk/abi"
)

// Start recovers every task from the catalog and starts the engine.
// PENDING tasks re-take their resource keys without blocking: a conflict
// means two conflicting PENDING tasks were persisted, which the engine
// never does, so the catalog is corrupt and Start fails (ErrCorruptCatalog)
// — hostd refuses to start rather than run them concurrently.
// Appends lost between the WAL and their checkpoint commit are found again
// (see package doc) and never re-appended. Callbacks of recovered tasks
// start in control-channel time-tick order. GC runs once before Start
// returns.
func (e *Engine) Start(ctx context.Context) error {
	e.mu.Lock()
	if e.started || e.closed {
		e.mu.Unlock()
		return errors.New("broadcast: Start called twice or after Close")
	}
	e.started = true
	e.mu.Unlock()

	tasks, err := e.load(ctx)
	if err != nil {
		return err
	}
	var pending []*task
	for _, t := range tasks {
		if t.rec.State == StatePending {
			pending = append(pending, t)
		}
	}
	sort.Slice(pending, func(i, j int) bool { return pending[i].rec.ID < pending[j].rec.ID })
	release := func() {
		for _, t := range pending {
			if t.guard != nil {
				t.guard.Release()
				t.guard = nil
			}
		}
	}
	for _, t := range pending {
		h, opts, lerr := e.lookup(t.rec.Message.Type)
		if lerr != nil {
			// The plugin is gone: keep the task (it still holds its keys
			// and shows up in Get) but it cannot run its callback; it
			// retries, failing, so an operator sees it and can abandon it.
			e.log.Error("recovered task has no handler", "id", t.rec.ID, "type", t.rec.Message.Type)
			h = missingHandler{t.rec.Message.Type}
		}
		t.handler, t.opts = h, opts
		g, lerr := e.o.Locker.TryLock(t.rec.Keys)
		if lerr != nil {
			release()
			return fmt.Errorf("%w: PENDING task %d cannot re-take its resource keys (%v); two conflicting PENDING tasks exist — refusing to start", ErrCorruptCatalog, t.rec.ID, lerr)
		}
		t.guard = g
	}
	if err := e.findLostAppends(ctx, pending); err != nil {
		release()
		return err
	}
	// One root span per start, linked to every recovered task's trace.
	var links []trace.Link
	for _, t := range pending {
		if sc := trace.SpanContextFromContext(t.parentContext()); sc.IsValid() {
			links = append(links, trace.Link{SpanContext: sc, Attributes: []attribute.KeyValue{attribute.Int64("hostd.broadcast.id", int64(t.rec.ID))}})
		}
	}
	_, rspan := e.tracer.Start(context.Background(), "hostd.recover", trace.WithNewRoot(),
		trace.WithSpanKind(trace.SpanKindInternal), trace.WithLinks(links...),
		trace.WithAttributes(attribute.Int("hostd.recovered.tasks", len(pending))))
	rsc := rspan.SpanContext()

	e.mu.Lock()
	for _, t := range tasks {
		t.init()
		e.tasks[t.rec.ID] = t
		e.byState[t.rec.State]++
		if t.rec.IdemKey != "" {
			e.index[idemIndexKey(t.rec.Message.Type, t.rec.Scope, t.rec.IdemKey)] = &idemEntry{task: t}
		}
	}
	// Callback order of conflicting tasks = control-channel time tick.
	sort.SliceStable(pending, func(i, j int) bool {
		ci, oki := pending[i].cps[ControlChannel]
		cj, okj := pending[j].cps[ControlChannel]
		if oki != okj {
			return oki
		}
		if oki && ci.TimeTick != cj.TimeTick {
			return ci.TimeTick < cj.TimeTick
		}
		return pending[i].rec.ID < pending[j].rec.ID
	})
	for _, t := range pending {
		t.recovered = true
		t.recoverLink = rsc
		t.started = e.o.Clock.Now()
	}
	e.wg.Add(2)
	go e.appendLoop()
	go e.gcLoop()
	for _, t := range pending {
		e.startDriver(t)
	}
	e.running = true // the index is complete: duplicates are recognized
	e.mu.Unlock()
	rspan.End()
	if len(tasks) > 0 {
		e.log.Info("broadcast recovery done", "tasks", len(tasks), "pending", len(pending))
	}
	if err := e.gc(ctx); err != nil {
		e.log.Warn("startup GC failed", "err", err)
	}
	return nil
}

type missingHandler struct{ typ string }

func (m missingHandler) ResourceKeys(context.Context, *Message) ([]abi.ResourceKey, error) {
	return nil, nil
}
func (m missingHandler) Validate(context.Context, *Message, catalog.Reader) error {
	return fmt.Errorf("%w: %q", ErrUnknownType, m.typ)
}
func (m missingHandler) Ack(context.Context, *AckCall) (AckResult, error) {
	return AckResult{}, fmt.Errorf("%w: %q is no longer registered", ErrUnknownType, m.typ)
}

// load reads every task, checkpoint and ack.
func (e *Engine) load(ctx context.Context) (map[uint64]*task, error) {
	tasks := map[uint64]*task{}
	err := e.o.Store.View(ctx, func(r catalog.Reader) error {
		if err := r.Scan([]byte(prefixTask), prefixEnd(prefixTask), func(kv catalog.KV) error {
			rec, err := decodeTask(kv.Key, kv.Value)
			if err != nil {
				return err
			}
			tasks[rec.ID] = &task{rec: *rec, cps: map[string]cpRecord{}, acks: map[string]bool{}}
			return nil
		}); err != nil {
			return err
		}
		if err := r.Scan([]byte(prefixCP), prefixEnd(prefixCP), func(kv catalog.KV) error {
			id, vc, err := parseIDKey(prefixCP, kv.Key)
			if err != nil {
				return err
			}
			var cp cpRecord
			if err := json.Unmarshal(kv.Value, &cp); err != nil {
				return fmt.Errorf("%w: checkpoint %q: %v", ErrCorruptCatalog, kv.Key, err)
			}
			if t := tasks[id]; t != nil {
				t.cps[vc] = cp
			}
			return nil
		}); err != nil {
			return err
		}
		return r.Scan([]byte(prefixAck), prefixEnd(prefixAck), func(kv catalog.KV) error {
			id, vc, err := parseIDKey(prefixAck, kv.Key)
			if err != nil {
				return err
			}
			if t := tasks[id]; t != nil {
				t.acks[vc] = true
			}
			return nil
		})
	})
	if err != nil {
		return nil, fmt.Errorf("broadcast: recovery: %w", err)
	}
	return tasks, nil
}

// findLostAppends finds appends of tasks whose checkpoints never reached
// the catalog (a crash between the append and the task's next write): it
// reads each such vchannel from the lowest low-water mark of the tasks
// that need it and matches the hostd.broadcast.id (and epoch) header of
// records of hostd's kinds (wal.KindBroadcast/KindMarker) — plus legacy,
// kind-less records for tasks created before record kinds existed. The
// found checkpoints are committed, so nothing is appended twice.
func (e *Engine) findLostAppends(ctx context.Context, tasks []*task) error {
	type want struct {
		t      *task
		epoch  int
		legacy bool // the task predates record kinds: legacy records may be its appends
	}
	need := map[string]map[uint64]want{}
	from := map[string]uint64{}
	for _, t := range tasks {
		t.mu.Lock()
		for _, vc := range t.rec.VChannels {
			if cp, ok := t.cps[vc]; ok && (vc != ControlChannel || cp.Epoch == t.rec.Epoch) {
				continue
			}
			low, ok := t.rec.LowWater[vc]
			if need[vc] == nil {
				need[vc] = map[uint64]want{}
				from[vc] = low
			}
			if !ok {
				low = 0 // no mark: read the whole vchannel
			}
			if low < from[vc] {
				from[vc] = low
			}
			need[vc][t.rec.ID] = want{t, t.rec.Epoch, !t.rec.Kinds}
		}
		t.mu.Unlock()
	}
	var ops []catalog.Op
	const page = 256
	for vc, ids := range need {
		at := from[vc]
		for {
			ents, err := e.o.Channels.Read(ctx, vc, at, page)
			if err != nil {
				if errors.Is(err, ErrUnknownVChannel) {
					break
				}
				return fmt.Errorf("broadcast: recovery: read %s from %d: %w", vc, at, err)
			}
			for _, ent := range ents {
				// Only hostd's own records: a client's data record may carry
				// anything in its properties (the WAL refuses the hostd.
				// namespace in data, but never trust it here).
				if !ent.Kind.Hostd() && ent.Kind != wal.KindLegacy {
					continue
				}
				id, perr := strconv.ParseUint(ent.Properties[HeaderBroadcastID], 10, 64)
				if perr != nil {
					continue
				}
				w, ok := ids[id]
				if !ok || (ent.Kind == wal.KindLegacy && !w.legacy) {
					continue
				}
				ep, _ := strconv.Atoi(ent.Properties[headerEpoch])
				if ep != w.epoch {
					continue
				}
				cp := cpRecord{Checkpoint: ent.Checkpoint, Attempts: 1, Epoch: ep}
				cp.VChannel, cp.Offset = vc, ent.Offset
				w.t.mu.Lock()
				w.t.cps[vc] = cp
				if w.t.cpSaved != nil {
					w.t.cpSaved[vc] = true
				}
				w.t.mu.Unlock()
				ops = append(ops, catalog.Op{Key: cpKey(id, vc), Value: mustJSON(&cp)})
				e.log.Info("recovered append without checkpoint", "id", id, "vchannel", vc, "offset", ent.Offset)
			}
			if len(ents) == 0 {
				break
			}
			at = ents[len(ents)-1].Offset + 1
		}
	}
	if len(ops) == 0 {
		return nil
	}
	if _, err := e.o.Store.Commit(ctx, &catalog.Batch{Ops: ops}); err != nil {
		return fmt.Errorf("broadcast: recovery: commit found checkpoints: %w", err)
	}
	return nil
}

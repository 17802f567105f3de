package broadcast

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"sort"
	"strconv"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/hostd-dev/hostd/runtime/catalog"
	"github.com/hostd-dev/hostd/runtime/failpoint"
	"github.com/hostd-dev/hostd/runtime/wal"
	"github.com/hostd-dev/hostd/sdk/abi"
)

// Engine is the broadcast engine. Create it with New, register built-ins,
// Start it (recovery), then Submit. Safe for concurrent use.
type Engine struct {
	o      Options
	log    *slog.Logger
	tracer trace.Tracer
	m      *metrics

	builtins map[string]builtin

	mu      sync.Mutex
	started bool // Start was called
	running bool // recovery finished: Submit is served
	closed  bool
	tasks   map[uint64]*task
	index   map[string]*idemEntry // idempotency index
	// lockWaits are the Locker.Lock calls in progress (see Locks).
	lockWaits map[*lockWait]struct{}
	byState   map[State]int

	gcMu sync.Mutex // serializes GC and Retry

	idMu          sync.Mutex
	idNext, idEnd uint64

	appendCh chan []*appendReq // one message per task's attempts

	ctx    context.Context // ends at Close (cause: errShuttingDown)
	cancel context.CancelCauseFunc
	wg     sync.WaitGroup // drivers, loops
	gcKick chan struct{}
}

type builtin struct {
	h    Handler
	opts TypeOptions
}

// idEntry is one idempotency-index slot: a reservation (task == nil,
// reserved open) or the task that owns the key.
type idemEntry struct {
	task     *task
	reserved chan struct{} // closed when the reservation resolves
}

// task is the in-memory state of one broadcast. Guarded by mu.
type task struct {
	tid uint64 // == rec.ID, immutable (readable without mu)
	typ string // == rec.Message.Type, immutable

	mu  sync.Mutex
	rec taskRecord
	cps map[string]cpRecord // vchannel → checkpoint
	// cpSaved marks checkpoints already in the catalog; the others are
	// committed with the task's next record write (TOMBSTONE for FastAck).
	cpSaved map[string]bool
	acks    map[string]bool // explicit acks (AckSyncUp)

	appendAttempts map[string]int
	appendErrs     map[string]string

	handler Handler
	opts    TypeOptions
	guard   Guard

	// persistOps is the PENDING record of a new task until it is durable:
	// it is committed with the task's first appends (or on its own first,
	// when the channels cannot commit atomically). nil once persisted.
	persistOps []catalog.Op
	persisted  chan struct{} // closed once the task is in the catalog
	createSpan trace.Span    // `create broadcast`, ended when persisted
	// dropped is closed when the PENDING record failed to commit for good
	// (dropErr says why): the task never existed, its keys are released.
	// nil for a task loaded from the catalog.
	dropped chan struct{}
	dropErr error

	done     chan struct{}           // closed when the current run finishes
	appended chan struct{}           // closed when every vchannel has a checkpoint
	wake     chan struct{}           // ack arrived (cap 1)
	cancel   context.CancelCauseFunc // ends the driver (cause: errAbandoned)
	exited   chan struct{}           // closed when the driver goroutine returns

	recovered   bool
	recoverLink trace.SpanContext
	started     time.Time // for latency
}

// New validates o and builds an engine. Register built-ins, then Start.
func New(o Options) (*Engine, error) {
	if err := o.Validate(); err != nil {
		return nil, err
	}
	o.setDefaults()
	if err := CheckLimits(o.MaxPayload, o.MaxKeyLen, nil, o.MaxRecordBytes, o.MaxMessageBytes); err != nil {
		return nil, fmt.Errorf("broadcast: impossible options: %w", err)
	}
	ctx, cancel := context.WithCancelCause(context.Background())
	e := &Engine{
		o:         o,
		log:       o.Logger.With("component", "broadcast"),
		tracer:    o.TracerProvider.Tracer("github.com/hostd-dev/hostd/builtin/broadcast"),
		builtins:  map[string]builtin{},
		tasks:     map[uint64]*task{},
		index:     map[string]*idemEntry{},
		lockWaits: map[*lockWait]struct{}{},
		byState:   map[State]int{},
		appendCh:  make(chan []*appendReq, 1024),
		ctx:       ctx,
		cancel:    cancel,
		gcKick:    make(chan struct{}, 1),
	}
	m, err := newMetrics(o.MeterProvider, e)
	if err != nil {
		cancel(nil)
		return nil, err
	}
	e.m = m
	return e, nil
}

// Register adds a built-in message type (before Start). A built-in wins
// over a plugin type of the same name.
func (e *Engine) Register(msgType string, h Handler, opts TypeOptions) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.started {
		return fmt.Errorf("broadcast: Register(%q) after Start", msgType)
	}
	if msgType == "" || h == nil {
		return fmt.Errorf("%w: built-in needs a type name and a handler", ErrInvalidRequest)
	}
	if _, dup := e.builtins[msgType]; dup {
		return fmt.Errorf("broadcast: built-in type %q registered twice", msgType)
	}
	e.builtins[msgType] = builtin{h, opts}
	return nil
}

// lookup finds the handler of msgType (nil handler with ok=true when the
// type is unhandled but allowed).
func (e *Engine) lookup(msgType string) (Handler, TypeOptions, error) {
	if b, ok := e.builtins[msgType]; ok {
		return b.h, b.opts, nil
	}
	if e.o.Handlers != nil {
		if h, opts, ok := e.o.Handlers.Lookup(msgType); ok {
			return h, opts, nil
		}
	}
	if e.o.AllowUnhandled {
		return nil, TypeOptions{}, nil
	}
	return nil, TypeOptions{}, fmt.Errorf("%w: %q (no built-in or plugin registered it)", ErrUnknownType, msgType)
}

// ---- Submit: steps 1–4 ----

// Submit runs a broadcast. It returns when req.Wait is reached (default
// done), or when ctx ends: then an original request gets its ID with state
// PENDING and the context's error, a duplicate gets only the error.
//
// Errors: ErrInvalidRequest, ErrUnknownType, ErrUnknownVChannel,
// ErrKeyTooLong, *TooLargeError (ErrTooLarge), *IdempotencyConflictError
// (ErrIdempotencyConflict), *RejectedError (ErrRejected), ErrClosed, ctx
// errors, catalog errors (a PENDING record that can never be committed:
// the task is dropped and no ID is returned).
func (e *Engine) Submit(ctx context.Context, req *Request) (*Result, error) {
	e.mu.Lock()
	closed, running := e.closed, e.running
	e.mu.Unlock()
	if closed {
		return nil, ErrClosed
	}
	if !running {
		return nil, ErrNotStarted
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := context.AfterFunc(e.ctx, cancel) // Close ends waits and lock waits
	defer stop()
	msg, vcs, err := e.normalize(ctx, req)
	if err != nil {
		return nil, err
	}
	h, topts, err := e.lookup(msg.Type)
	if err != nil {
		return nil, err
	}
	keys := slices.Clone(req.ResourceKeys)
	if h != nil {
		tk, err := h.ResourceKeys(ctx, &msg)
		if err != nil {
			return nil, &RejectedError{Type: msg.Type, Err: fmt.Errorf("resource keys: %w", err)}
		}
		keys = append(keys, tk...)
	}
	keys = withClusterKey(keys)
	ackSync := topts.AckSyncUp
	if req.AckSyncUp != nil {
		ackSync = *req.AckSyncUp
	}
	wait := req.Wait
	if wait == "" {
		wait = WaitDone
	}
	ik := ""
	if req.IdempotencyKey != "" {
		ik = idemIndexKey(msg.Type, req.Scope, req.IdempotencyKey)
	}
	// Size the task record and the message at their worst case before any
	// reservation, lock or ID: what can never be stored is refused now.
	if err := e.checkSize(&taskRecord{Message: msg, VChannels: vcs, Keys: keys,
		IdemKey: req.IdempotencyKey, Scope: req.Scope}); err != nil {
		e.m.tooLarge.Add(ctx, 1)
		return nil, err
	}
	fp := fingerprint(&msg, vcs)
	for {
		// Step 2 before step 1: the idempotency lookup and reservation
		// come before the locks, so a retry never waits behind locks (its
		// original's or anyone's).
		var mine *idemEntry
		if ik != "" {
			e.mu.Lock()
			ent := e.index[ik]
			switch {
			case ent == nil:
				if len(req.IdempotencyKey) > e.o.MaxKeyLen {
					e.mu.Unlock()
					return nil, fmt.Errorf("%w: %d bytes, max %d", ErrKeyTooLong, len(req.IdempotencyKey), e.o.MaxKeyLen)
				}
				mine = &idemEntry{reserved: make(chan struct{})}
				e.index[ik] = mine
				e.mu.Unlock()
			case ent.task != nil:
				t := ent.task
				e.mu.Unlock()
				// Entries persisted before fingerprints existed match on
				// the key alone.
				if ofp := t.fingerprint(); ofp != "" && ofp != fp {
					e.m.idemConflicts.Add(ctx, 1)
					return nil, &IdempotencyConflictError{Type: msg.Type, Key: req.IdempotencyKey, OriginalID: t.tid}
				}
				res, err := e.wait(ctx, t, wait, true)
				if errors.Is(err, errOriginalDropped) {
					continue // the original was never persisted: go on as a new request
				}
				return res, err
			default:
				ch := ent.reserved
				e.mu.Unlock()
				select {
				case <-ch:
					continue // the reservation resolved: look again
				case <-ctx.Done():
					return nil, ctx.Err()
				}
			}
		}
		lw := e.addLockWait(0, msg.Type, keys)
		guard, err := e.o.Locker.Lock(ctx, keys)
		if err != nil {
			err = e.lockWaitError(lw, err) // names the key it waited for and its holders
		}
		e.removeLockWait(lw)
		if err != nil {
			if mine != nil {
				e.mu.Lock()
				delete(e.index, ik)
				close(mine.reserved)
				e.mu.Unlock()
			}
			return nil, err
		}
		t, err := e.create(ctx, &msg, vcs, keys, req, ackSync, h, topts, guard)
		if err != nil {
			guard.Release()
			if mine != nil {
				e.mu.Lock()
				delete(e.index, ik)
				close(mine.reserved)
				e.mu.Unlock()
			}
			return nil, err
		}
		e.mu.Lock()
		if e.closed { // raced with Close: nothing was persisted or appended
			if mine != nil {
				delete(e.index, ik)
				close(mine.reserved)
			}
			e.mu.Unlock()
			t.createSpan.End()
			guard.Release()
			return nil, ErrClosed
		}
		e.tasks[t.tid] = t
		e.byState[StatePending]++
		if mine != nil {
			mine.task = t
			close(mine.reserved)
		}
		e.startDriver(t)
		e.mu.Unlock()
		return e.wait(ctx, t, wait, false)
	}
}

// normalize checks the request and returns the message and the sorted,
// de-duplicated vchannels (control channel included).
func (e *Engine) normalize(ctx context.Context, req *Request) (Message, []string, error) {
	if req == nil {
		return Message{}, nil, fmt.Errorf("%w: nil request", ErrInvalidRequest)
	}
	msg := req.Message
	if msg.Type == "" {
		return msg, nil, fmt.Errorf("%w: message type is empty", ErrInvalidRequest)
	}
	if len(msg.Type) > 256 {
		return msg, nil, fmt.Errorf("%w: message type longer than 256 bytes", ErrInvalidRequest)
	}
	if len(msg.Payload) > e.o.MaxPayload {
		return msg, nil, &TooLargeError{What: "payload", Size: len(msg.Payload), Limit: e.o.MaxPayload, LimitOption: "broadcast.max_payload"}
	}
	if err := wal.CheckProps(0, msg.Properties); err != nil {
		var re *wal.ReservedPropertyError
		errors.As(err, &re)
		return msg, nil, fmt.Errorf("%w: property %q is reserved (the %q namespace is hostd's)", ErrInvalidRequest, re.Property, wal.ReservedPrefix)
	}
	switch req.Scope.Kind {
	case "", "cluster":
		if req.Scope.ID != "" {
			return msg, nil, fmt.Errorf("%w: cluster scope takes no id", ErrInvalidRequest)
		}
	case "database", "collection":
		if req.Scope.ID == "" {
			return msg, nil, fmt.Errorf("%w: %s scope needs an id", ErrInvalidRequest, req.Scope.Kind)
		}
	default:
		return msg, nil, fmt.Errorf("%w: unknown idempotency scope %q (cluster, database, collection)", ErrInvalidRequest, req.Scope.Kind)
	}
	switch req.Wait {
	case "", WaitDone, WaitAppended, WaitPersisted:
	default:
		return msg, nil, fmt.Errorf("%w: wait must be done, appended or persisted (got %q)", ErrInvalidRequest, req.Wait)
	}
	for i, k := range req.ResourceKeys {
		if k.Domain == "" || k.Key == "" {
			return msg, nil, fmt.Errorf("%w: resource key #%d: empty domain or key", ErrInvalidRequest, i)
		}
		if len(k.Domain) > 256 || len(k.Key) > 512 {
			return msg, nil, fmt.Errorf("%w: resource key #%d too long", ErrInvalidRequest, i)
		}
		if k.Mode != abi.Shared && k.Mode != abi.Exclusive {
			return msg, nil, fmt.Errorf("%w: resource key #%d: unknown mode %d", ErrInvalidRequest, i, k.Mode)
		}
	}
	if len(req.VChannels) > e.o.MaxVChannels {
		return msg, nil, fmt.Errorf("%w: %d vchannels, max %d", ErrInvalidRequest, len(req.VChannels), e.o.MaxVChannels)
	}
	set := map[string]bool{ControlChannel: true}
	for _, vc := range req.VChannels {
		if vc == "" {
			return msg, nil, fmt.Errorf("%w: empty vchannel name", ErrInvalidRequest)
		}
		set[vc] = true
	}
	vcs := make([]string, 0, len(set))
	for vc := range set {
		vcs = append(vcs, vc)
	}
	sort.Strings(vcs)
	for _, vc := range vcs {
		if err := e.o.Channels.Check(ctx, vc); err != nil {
			return msg, nil, err
		}
	}
	return msg, vcs, nil
}

// withClusterKey adds a shared cluster key unless a cluster-domain key is
// present.
func withClusterKey(keys []abi.ResourceKey) []abi.ResourceKey {
	for _, k := range keys {
		if k.Domain == abi.DomainCluster {
			return keys
		}
	}
	return append(keys, abi.ResourceKey{Domain: abi.DomainCluster, Key: "cluster", Mode: abi.Shared})
}

// create validates (step 3), allocates the ID and prepares the PENDING
// record (step 4). The record is committed with the task's first appends
// (appendRound), so persist and append are one durable write and an
// append never exists without its task.
func (e *Engine) create(ctx context.Context, msg *Message, vcs []string, keys []abi.ResourceKey,
	req *Request, ackSync bool, h Handler, topts TypeOptions, guard Guard) (*task, error) {
	if h != nil {
		err := e.o.Store.View(ctx, func(r catalog.Reader) error { return h.Validate(ctx, msg, r) })
		if err != nil {
			return nil, &RejectedError{Type: msg.Type, Err: err}
		}
	}
	id, err := e.nextID(ctx)
	if err != nil {
		return nil, fmt.Errorf("broadcast: allocate id: %w", err)
	}
	now := e.o.Clock.Now()
	ctx, span := e.tracer.Start(ctx, "create broadcast",
		trace.WithSpanKind(trace.SpanKindProducer),
		trace.WithAttributes(
			attribute.String("messaging.system", "hostd"),
			attribute.String("messaging.operation.type", "create"),
			attribute.String("messaging.message.id", strconv.FormatUint(id, 10)),
			attribute.Int64("hostd.broadcast.id", int64(id)),
			attribute.String("hostd.message.type", msg.Type),
		))
	carrier := propagation.MapCarrier{}
	propagation.TraceContext{}.Inject(ctx, carrier)
	if len(carrier["tracestate"]) > maxTraceState {
		delete(carrier, "tracestate") // bounded, so that the record's worst case is known
	}
	low := make(map[string]uint64, len(vcs))
	for _, vc := range vcs {
		n, err := e.o.Channels.Next(ctx, vc)
		if err != nil {
			span.RecordError(err)
			span.SetStatus(codes.Error, err.Error())
			span.End()
			return nil, fmt.Errorf("broadcast: read %s: %w", vc, err)
		}
		low[vc] = n
	}
	t := &task{
		rec: taskRecord{
			ID: id, State: StatePending, Message: *msg, VChannels: vcs, Keys: keys,
			IdemKey: req.IdempotencyKey, Scope: req.Scope, AckSyncUp: ackSync,
			Trace: map[string]string(carrier), CreatedAt: now, LowWater: low, Kinds: true,
			Fingerprint: fingerprint(msg, vcs),
		},
		handler: h, opts: topts, guard: guard, started: now,
	}
	t.init()
	t.persisted = make(chan struct{})
	t.dropped = make(chan struct{})
	t.persistOps = []catalog.Op{{Key: taskKey(id), Value: mustJSON(&t.rec)}}
	t.createSpan = span
	return t, nil
}

// markPersisted records that the PENDING record of each task is durable.
// `create broadcast` ends right after the commit: its context is
// persisted, so it must be exported even if hostd dies next.
func (e *Engine) markPersisted(ts []*task) {
	for _, t := range ts {
		t.mu.Lock()
		t.persistOps = nil
		close(t.persisted)
		t.mu.Unlock()
		t.createSpan.End()
	}
	if len(ts) > 0 {
		failpoint.Hit("broadcast.after-persist")
	}
}

func (t *task) init() {
	t.tid, t.typ = t.rec.ID, t.rec.Message.Type
	if t.cps == nil {
		t.cps = map[string]cpRecord{}
	}
	if t.acks == nil {
		t.acks = map[string]bool{}
	}
	if t.cpSaved == nil {
		t.cpSaved = map[string]bool{}
		for vc := range t.cps {
			t.cpSaved[vc] = true // loaded from the catalog
		}
	}
	t.appendAttempts = map[string]int{}
	t.appendErrs = map[string]string{}
	t.done = make(chan struct{})
	t.appended = make(chan struct{})
	t.persisted = make(chan struct{})
	close(t.persisted) // loaded from the catalog; create replaces it
	t.wake = make(chan struct{}, 1)
	if t.rec.State.Finished() {
		close(t.done)
	}
	if t.allAppendedLocked() {
		close(t.appended)
	}
}

// unsavedLocked returns puts of the checkpoints not yet in the catalog and
// their vchannels (pass them to markSaved after the commit).
func (t *task) unsavedLocked() ([]catalog.Op, []string) {
	var ops []catalog.Op
	var vcs []string
	for vc, cp := range t.cps {
		if !t.cpSaved[vc] {
			cp := cp
			ops = append(ops, catalog.Op{Key: cpKey(t.tid, vc), Value: mustJSON(&cp)})
			vcs = append(vcs, vc)
		}
	}
	return ops, vcs
}

func (t *task) markSaved(vcs []string) {
	t.mu.Lock()
	for _, vc := range vcs {
		t.cpSaved[vc] = true
	}
	t.mu.Unlock()
}

// saveCheckpoints commits the unsaved checkpoints, retrying until it
// works or ctx ends.
func (e *Engine) saveCheckpoints(ctx context.Context, t *task) bool {
	for n := 1; ; n++ {
		t.mu.Lock()
		ops, vcs := t.unsavedLocked()
		t.mu.Unlock()
		if len(ops) == 0 {
			return true
		}
		if _, err := e.o.Store.Commit(ctx, &catalog.Batch{Ops: ops}); err == nil {
			t.markSaved(vcs)
			return true
		} else if ctx.Err() == nil {
			e.log.Warn("commit checkpoints failed; retrying", "id", t.tid, "err", err)
		}
		select {
		case <-e.o.Clock.After(backoff(n)):
		case <-ctx.Done():
			return false
		}
	}
}

func (t *task) allAppendedLocked() bool {
	for _, vc := range t.rec.VChannels {
		if cp, ok := t.cps[vc]; !ok || (vc == ControlChannel && cp.Epoch != t.rec.Epoch) {
			return false
		}
	}
	return true
}

func (t *task) missingAcksLocked() []string {
	var miss []string
	for _, vc := range t.rec.VChannels {
		_, appended := t.cps[vc]
		switch {
		case !appended:
			miss = append(miss, vc)
		case vc == ControlChannel || !t.rec.AckSyncUp:
		case !t.acks[vc]:
			miss = append(miss, vc)
		}
	}
	return miss
}

func (e *Engine) nextID(ctx context.Context) (uint64, error) {
	e.idMu.Lock()
	defer e.idMu.Unlock()
	if e.idNext >= e.idEnd {
		first, err := e.o.Store.NextSequence(ctx, seqName, idBlock)
		if err != nil {
			return 0, err
		}
		if first == 0 { // keep 0 free: it means "none" in filters
			first = 1
		}
		e.idNext, e.idEnd = first, first+idBlock
		if e.idEnd < first { // overflow; cannot happen in practice
			return 0, errors.New("broadcast: id sequence exhausted")
		}
	}
	id := e.idNext
	e.idNext++
	return id, nil
}

// wait blocks until the task reaches w or ctx ends.
func (e *Engine) wait(ctx context.Context, t *task, w Wait, dup bool) (*Result, error) {
	t.mu.Lock()
	done, appended, persisted, dropped := t.done, t.appended, t.persisted, t.dropped
	t.mu.Unlock()
	// pending answers an original whose wait ended early: its ID only if
	// the task is durably in the catalog, else only the error (an ID that
	// was never persisted must not be handed out).
	pending := func(err error) (*Result, error) {
		select {
		case <-persisted:
			return &Result{ID: t.id(), State: StatePending}, err
		default:
			return nil, err
		}
	}
	var ch <-chan struct{}
	switch w {
	case WaitPersisted:
		ch = persisted
	case WaitAppended:
		ch = appended
	default:
		ch = done
	}
	if ch != nil {
		select {
		case <-ch:
		case <-done:
		case <-dropped:
			if dup {
				return nil, errOriginalDropped
			}
			return nil, t.dropErr
		case <-ctx.Done():
			if dup {
				return nil, ctx.Err()
			}
			return pending(ctx.Err())
		case <-e.ctx.Done():
			if dup {
				return nil, ErrClosed
			}
			return pending(ErrClosed)
		}
	}
	r := t.result()
	r.Duplicate = dup
	return r, nil
}

func (t *task) id() uint64 { return t.tid }

func (t *task) result() *Result {
	t.mu.Lock()
	defer t.mu.Unlock()
	r := &Result{ID: t.rec.ID, State: t.rec.State}
	if t.rec.State == StateFailed {
		r.Error = t.rec.LastError
	}
	for _, vc := range t.rec.VChannels {
		if cp, ok := t.cps[vc]; ok {
			r.Appends = append(r.Appends, cp.Checkpoint)
		}
	}
	return r
}

// ---- the task driver: steps 5–8 ----

const headerEpoch = "hostd.broadcast.epoch"

func (e *Engine) startDriver(t *task) {
	ctx, cancel := context.WithCancelCause(e.ctx)
	t.mu.Lock()
	t.cancel = cancel
	t.exited = make(chan struct{})
	exited := t.exited
	t.mu.Unlock()
	e.wg.Add(1)
	go func() {
		defer e.wg.Done()
		defer close(exited)
		defer cancel(nil)
		e.drive(ctx, t)
		t.mu.Lock()
		unpersisted := t.persistOps != nil
		dropErr := t.dropErr
		t.mu.Unlock()
		if dropErr != nil {
			e.drop(t, dropErr)
			return
		}
		if unpersisted {
			// Closed before the task was committed. An append still in
			// the append loop may yet commit it (with its record, never
			// without); else it never existed. End `create` either way.
			t.createSpan.SetStatus(codes.Error, "not persisted before the engine closed")
			t.createSpan.End()
		}
	}()
}

// parentContext is the persisted `create` span context (a remote parent);
// a missing or garbled carrier gives a new root.
func (t *task) parentContext() context.Context {
	return propagation.TraceContext{}.Extract(context.Background(), propagation.MapCarrier(t.rec.Trace))
}

func (e *Engine) drive(ctx context.Context, t *task) {
	if !e.appendAll(ctx, t) {
		return
	}
	// A FastAck task commits its checkpoints with its TOMBSTONE; consumers
	// of an AckSyncUp task ack what is durable.
	if t.rec.AckSyncUp && !e.saveCheckpoints(ctx, t) {
		return
	}
	if !e.waitAcks(ctx, t) {
		return
	}
	failpoint.Hit("broadcast.after-acks")
	e.callback(ctx, t)
}

type appendResult struct {
	vc  string
	out AppendOutcome
}

// appendAll appends every vchannel without a checkpoint, retrying each
// failed vchannel on its own with backoff. False if ctx ended.
func (e *Engine) appendAll(ctx context.Context, t *task) bool {
	t.mu.Lock()
	var todo []string
	for _, vc := range t.rec.VChannels {
		if cp, ok := t.cps[vc]; !ok || (vc == ControlChannel && cp.Epoch != t.rec.Epoch) {
			todo = append(todo, vc)
		}
	}
	t.mu.Unlock()
	if len(todo) == 0 {
		return true
	}
	parent := t.parentContext()
	results := make(chan appendResult, len(todo))
	pending := len(todo)
	e.sendAppend(ctx, parent, t, todo, results)
	for pending > 0 {
		select {
		case r := <-results:
			if r.out.Err == nil {
				pending--
				continue
			}
			if errors.Is(r.out.Err, errDropped) {
				return false // the PENDING record can never be committed
			}
			t.mu.Lock()
			n := t.appendAttempts[r.vc]
			t.mu.Unlock()
			d := backoff(n)
			e.log.Debug("append failed; retrying", "broadcast_id", t.rec.ID, "vchannel", r.vc, "attempt", n, "retry_in", d, "err", r.out.Err)
			vc := r.vc
			go func() {
				select {
				case <-e.o.Clock.After(d):
					e.sendAppend(ctx, parent, t, []string{vc}, results)
				case <-ctx.Done():
				}
			}()
		case <-ctx.Done():
			return false
		}
	}
	return true
}

// sendAppend starts one append attempt of each of vcs (a span each) and
// hands them to the append loop as one message, so they share a round.
// The results arrive on results.
func (e *Engine) sendAppend(ctx, parent context.Context, t *task, vcs []string, results chan<- appendResult) {
	t.mu.Lock()
	// One property map for every vchannel of the attempt: appends only
	// read it.
	props := make(map[string]string, len(t.rec.Message.Properties)+3)
	for k, v := range t.rec.Message.Properties {
		props[k] = v
	}
	props[HeaderBroadcastID] = strconv.FormatUint(t.rec.ID, 10)
	props[HeaderMessageType] = t.rec.Message.Type
	if t.rec.Epoch > 0 {
		props[headerEpoch] = strconv.Itoa(t.rec.Epoch)
	}
	payload, epoch := t.rec.Message.Payload, t.rec.Epoch
	attempts := make([]int, len(vcs))
	for i, vc := range vcs {
		t.appendAttempts[vc]++
		attempt := t.appendAttempts[vc]
		if cp, ok := t.cps[vc]; ok && attempt <= cp.Attempts {
			attempt = cp.Attempts + 1
			t.appendAttempts[vc] = attempt
		}
		attempts[i] = attempt
	}
	t.mu.Unlock()
	reqs := make([]*appendReq, len(vcs))
	for i, vc := range vcs {
		opts := []trace.SpanStartOption{
			trace.WithSpanKind(trace.SpanKindClient),
			trace.WithAttributes(e.spanAttrs(t, "send", attempts[i])...),
			trace.WithAttributes(attribute.String("messaging.destination.name", vc)),
		}
		if t.recovered {
			opts = append(opts, trace.WithLinks(trace.Link{SpanContext: t.recoverLink}))
		}
		_, span := e.tracer.Start(parent, "send "+vc, opts...)
		reqs[i] = &appendReq{t: t, entry: AppendEntry{VChannel: vc, Payload: payload, Properties: props},
			attempt: attempts[i], epoch: epoch, span: span, results: results}
	}
	e.m.appendAttempts.Add(ctx, int64(len(vcs)))
	select {
	case e.appendCh <- reqs:
	case <-ctx.Done():
		for _, r := range reqs {
			r.span.End()
		}
	}
}

func (e *Engine) spanAttrs(t *task, op string, attempt int) []attribute.KeyValue {
	return []attribute.KeyValue{
		attribute.String("messaging.system", "hostd"),
		attribute.String("messaging.operation.type", op),
		attribute.String("messaging.message.id", strconv.FormatUint(t.tid, 10)),
		attribute.Int64("hostd.broadcast.id", int64(t.tid)),
		attribute.String("hostd.message.type", t.typ),
		attribute.Int("hostd.attempt", attempt),
		attribute.Bool("hostd.recovered", t.recovered),
	}
}

// waitAcks blocks until every vchannel is acked. False if ctx ended.
func (e *Engine) waitAcks(ctx context.Context, t *task) bool {
	for {
		t.mu.Lock()
		miss := len(t.missingAcksLocked())
		t.mu.Unlock()
		if miss == 0 {
			return true
		}
		select {
		case <-t.wake:
		case <-ctx.Done():
			return false
		}
	}
}

// callback runs the ack callback until it succeeds (TOMBSTONE) or fails
// for good (FAILED), or ctx ends.
func (e *Engine) callback(ctx context.Context, t *task) {
	parent := t.parentContext()
	retries := 0 // consecutive non-attempt retries (commit errors)
	for {
		if mh, ok := t.handler.(missingHandler); ok { // the plugin may be back (reload)
			if h, opts, err := e.lookup(mh.typ); err == nil && h != nil {
				t.handler, t.opts = h, opts
			}
		}
		t.mu.Lock()
		attempt := t.rec.Attempts + 1
		call := &AckCall{BroadcastID: t.rec.ID, Message: t.rec.Message, Attempt: attempt, Recovered: t.recovered}
		for _, vc := range t.rec.VChannels {
			call.Appends = append(call.Appends, t.cps[vc].Checkpoint)
		}
		t.mu.Unlock()
		opts := []trace.SpanStartOption{
			trace.WithSpanKind(trace.SpanKindConsumer),
			trace.WithAttributes(e.spanAttrs(t, "process", attempt)...),
		}
		if t.recovered {
			opts = append(opts, trace.WithLinks(trace.Link{SpanContext: t.recoverLink}))
		}
		// The span's parent is the persisted trace context; the call runs
		// under the driver's ctx, which abandon (errAbandoned) and Close
		// (errShuttingDown) cancel, so a waiting or running callback (a
		// plugin call: the wasm watchdog stops the guest) ends at once.
		_, span := e.tracer.Start(parent, "process broadcast", opts...)
		sctx := trace.ContextWithSpan(ctx, span)
		if sc := span.SpanContext(); sc.IsValid() {
			tp := propagation.MapCarrier{}
			propagation.TraceContext{}.Inject(sctx, tp)
			call.TraceParent = tp["traceparent"]
		}
		e.m.callbackAttempts.Add(ctx, 1)
		var res AckResult
		var err error
		if t.handler != nil {
			t0 := e.o.Clock.Now()
			res, err = e.safeAck(sctx, t.handler, call)
			e.m.callbackDuration.Record(ctx, e.o.Clock.Now().Sub(t0).Seconds())
		}
		if ctx.Err() != nil {
			why := interruptReason(ctx)
			span.SetAttributes(attribute.String("hostd.interrupted", why))
			if err != nil {
				span.RecordError(err)
			}
			span.SetStatus(codes.Error, "interrupted: "+why)
			span.End()
			e.m.callbackInterrupted.Add(context.Background(), 1, metric.WithAttributes(attribute.String("reason", why)))
			return
		}
		if err != nil {
			span.RecordError(err)
			span.SetStatus(codes.Error, err.Error())
			span.End()
			e.m.callbackFailures.Add(ctx, 1)
			if !e.callbackFailed(ctx, t, attempt, err) {
				return
			}
			continue
		}
		failpoint.Hit("broadcast.mid-callback")
		now := e.o.Clock.Now()
		t.mu.Lock()
		rec := t.rec
		rec.State = StateTombstone
		rec.Attempts = attempt
		rec.FinishedAt = &now
		rec.NextRetry = nil
		rec.LastError = ""
		cpOps, cpVCs := t.unsavedLocked()
		t.mu.Unlock()
		ops := append(slices.Clone(res.Ops), cpOps...)
		b := &catalog.Batch{Checks: res.Checks, RangeChecks: res.RangeChecks,
			Ops: append(ops, catalog.Op{Key: taskKey(rec.ID), Value: mustJSON(&rec)})}
		failpoint.Hit("broadcast.before-tombstone")
		_, err = e.o.Store.Commit(ctx, b)
		if err != nil {
			span.RecordError(err)
			if errors.Is(err, catalog.ErrConflict) {
				span.SetAttributes(attribute.Bool("hostd.conflict", true))
				span.SetStatus(codes.Error, "kv conflict: callback re-run")
				span.End()
				e.m.callbackConflicts.Add(ctx, 1)
				t.mu.Lock()
				t.rec.Conflicts++
				c := t.rec.Conflicts
				t.mu.Unlock()
				// A short random pause spreads the re-runs of callbacks
				// that all read the same hot key (else most re-runs
				// conflict again).
				select {
				case <-e.o.Clock.After(conflictPause(c)):
				case <-ctx.Done():
					return
				}
				continue // a conflict re-run is not an attempt
			}
			span.SetStatus(codes.Error, err.Error())
			span.End()
			if ctx.Err() != nil {
				return
			}
			if errors.Is(err, catalog.ErrTooLarge) || errors.Is(err, catalog.ErrInvalid) {
				// The callback's writes cannot be committed (too large for
				// one atomic commit, or malformed): retrying cannot help.
				e.callbackFailed(ctx, t, attempt, Permanent(fmt.Errorf("commit callback writes: %w", err)))
				return
			}
			retries++
			e.log.Warn("tombstone commit failed; re-running callback", "id", rec.ID, "err", err)
			select {
			case <-e.o.Clock.After(backoff(retries)):
			case <-ctx.Done():
				return
			}
			continue
		}
		span.End()
		t.markSaved(cpVCs)
		failpoint.Hit("broadcast.after-tombstone")
		e.finish(t, rec)
		return
	}
}

// conflictPause is a random pause before the c-th conflict re-run:
// up to 1 ms, doubling per conflict, capped at 50 ms.
func conflictPause(c int) time.Duration {
	max := time.Millisecond << min(c-1, 6)
	if max > 50*time.Millisecond {
		max = 50 * time.Millisecond
	}
	return time.Duration(rand.Int64N(int64(max)) + 1)
}

// safeAck calls the handler, turning a panic into a retryable error (a
// handler bug must not take down the daemon).
func (e *Engine) safeAck(ctx context.Context, h Handler, call *AckCall) (res AckResult, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("broadcast: ack handler panicked: %v", r)
		}
	}()
	return h.Ack(ctx, call)
}

// callbackFailed records a failed attempt; true to retry after the backoff,
// false if the task is FAILED or ctx ended.
func (e *Engine) callbackFailed(ctx context.Context, t *task, attempt int, cause error) bool {
	now := e.o.Clock.Now()
	t.mu.Lock()
	t.rec.Attempts = attempt
	t.rec.LastError = clipJSON(cause.Error(), maxStoredError)
	permanent := IsPermanent(cause)
	exhausted := t.opts.MaxAttempts > 0 && attempt-t.rec.AttemptBase >= t.opts.MaxAttempts
	d := backoff(attempt - t.rec.AttemptBase)
	if !permanent && !exhausted {
		next := now.Add(d)
		t.rec.NextRetry = &next
	}
	rec := t.rec
	cpOps, cpVCs := t.unsavedLocked()
	t.mu.Unlock()
	if permanent || exhausted {
		reason := "permanent error"
		if !permanent {
			reason = fmt.Sprintf("max_attempts %d reached", t.opts.MaxAttempts)
		}
		rec.LastError = clipJSON(fmt.Sprintf("%s: %v", reason, cause), maxStoredError)
		e.fail(ctx, t, rec)
		return false
	}
	if _, err := e.o.Store.Commit(ctx, &catalog.Batch{Ops: append(cpOps, catalog.Op{Key: taskKey(rec.ID), Value: mustJSON(&rec)})}); err != nil {
		if ctx.Err() == nil {
			e.log.Warn("persist callback attempt failed", "id", rec.ID, "err", err)
		}
	} else {
		t.markSaved(cpVCs)
	}
	select {
	case <-e.o.Clock.After(d):
		return true
	case <-ctx.Done():
		return false
	}
}

// fail persists rec as FAILED (retrying the commit until it succeeds or
// ctx ends) and finishes the task.
func (e *Engine) fail(ctx context.Context, t *task, rec taskRecord) {
	now := e.o.Clock.Now()
	rec.State = StateFailed
	rec.FinishedAt = &now
	rec.NextRetry = nil
	for n := 1; ; n++ {
		t.mu.Lock()
		cpOps, cpVCs := t.unsavedLocked()
		t.mu.Unlock()
		_, err := e.o.Store.Commit(ctx, &catalog.Batch{Ops: append(cpOps, catalog.Op{Key: taskKey(rec.ID), Value: mustJSON(&rec)})})
		if err == nil {
			t.markSaved(cpVCs)
			break
		}
		if ctx.Err() != nil {
			return
		}
		e.log.Warn("persist FAILED state failed; retrying", "id", rec.ID, "err", err)
		select {
		case <-e.o.Clock.After(backoff(n)):
		case <-ctx.Done():
			return
		}
	}
	e.finish(t, rec)
}

// finish installs the final record, releases the locks and wakes waiters.
func (e *Engine) finish(t *task, rec taskRecord) {
	e.mu.Lock()
	t.mu.Lock()
	old := t.rec.State
	t.rec = rec
	g := t.guard
	t.guard = nil
	done := t.done
	started := t.started
	t.mu.Unlock()
	e.byState[old]--
	e.byState[rec.State]++
	e.mu.Unlock()
	if g != nil {
		g.Release()
	}
	select {
	case <-done:
	default:
		close(done)
	}
	if rec.State == StateTombstone {
		e.m.latency.Record(context.Background(), e.o.Clock.Now().Sub(started).Seconds())
	}
	e.m.finished.Add(context.Background(), 1, metricState(rec.State))
}

// errDropped marks the append outcomes of a task whose PENDING record
// failed to commit for good; errOriginalDropped tells a duplicate waiting
// on such a task to go on as a new request.
var (
	errDropped         = errors.New("broadcast: task dropped before it was persisted")
	errOriginalDropped = errors.New("broadcast: original dropped before it was persisted")
)

// permanentCommitError reports whether a commit error can never go away
// by retrying the same batch.
func permanentCommitError(err error) bool {
	return errors.Is(err, catalog.ErrTooLarge) || errors.Is(err, catalog.ErrInvalid)
}

// drop forgets a task whose PENDING record could not be committed for
// good: nothing of it is in the catalog or appended, so its keys and its
// idempotency reservation are released and its waiters get err (a
// duplicate waiter goes on as a new request). It never got an ID anyone
// was told about.
func (e *Engine) drop(t *task, err error) {
	e.mu.Lock()
	if e.tasks[t.tid] == t {
		delete(e.tasks, t.tid)
		e.byState[StatePending]--
	}
	t.mu.Lock()
	if t.rec.IdemKey != "" {
		ik := idemIndexKey(t.rec.Message.Type, t.rec.Scope, t.rec.IdemKey)
		if ent := e.index[ik]; ent != nil && ent.task == t {
			delete(e.index, ik)
		}
	}
	g := t.guard
	t.guard = nil
	t.persistOps = nil
	t.mu.Unlock()
	e.mu.Unlock()
	if g != nil {
		g.Release()
	}
	close(t.dropped)
	t.createSpan.RecordError(err)
	t.createSpan.SetStatus(codes.Error, "not persisted: "+err.Error())
	t.createSpan.End()
	e.m.dropped.Add(context.Background(), 1)
	e.log.Error("broadcast dropped: its task record cannot be committed", "id", t.tid, "type", t.typ, "err", err)
}

// Causes of a driver's cancellation: an admin abandoned the task, or the
// engine is closing. interruptReason names them for spans and metrics.
var (
	errAbandoned    = errors.New("broadcast: task abandoned")
	errShuttingDown = errors.New("broadcast: engine shutting down")
)

func interruptReason(ctx context.Context) string {
	switch c := context.Cause(ctx); {
	case errors.Is(c, errAbandoned):
		return "abandoned"
	case errors.Is(c, errShuttingDown):
		return "shutting down"
	default:
		return "cancelled"
	}
}

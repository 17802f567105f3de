package etcdcat

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/hostd-dev/hostd/runtime/catalog"
)

// Request states, as in the Badger committer: a queued request is taken by
// the committer or abandoned by its caller, whichever comes first.
const (
	reqQueued int32 = iota
	reqTaken
	reqAbandoned
)

type result struct {
	ver     catalog.Version
	err     error
	writers int
}

// cost is what one writer adds to an etcd txn.
type cost struct {
	n     int // compares + ops (+ generation puts)
	bytes int // request bytes, over-estimated
}

type request struct {
	b       *catalog.Batch
	ops     []catalog.Op // b.Ops, one per key (the last op of a key wins)
	gens    []string     // generation keys its deletes bump
	cost    cost
	state   atomic.Int32
	done    chan result
	retries int
}

// committer is the single goroutine through which every commit of one
// Store goes. See doc.go "Committer".
type committer struct {
	s *Store

	mu      sync.Mutex
	queue   []*request
	stopped bool
	wake    chan struct{}
	quit    chan struct{}
	done    chan struct{}

	rounds, txns, writers, committed, conflicts atomic.Uint64
	roundHook                                   atomic.Pointer[func(int)]

	// afterRead, if set (tests, before any commit), runs between a
	// round's read and its txn: where a writer outside this store races.
	afterRead func()
}

func newCommitter(s *Store) *committer {
	c := &committer{s: s, wake: make(chan struct{}, 1), quit: make(chan struct{}), done: make(chan struct{})}
	go c.run()
	return c
}

func (c *committer) isStopped() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.stopped
}

// Stats implements catalog.Probe (Txns counts etcd write txns).
func (s *Store) Stats() catalog.Stats {
	c := s.c
	return catalog.Stats{Rounds: c.rounds.Load(), Txns: c.txns.Load(), Writers: c.writers.Load(), Committed: c.committed.Load(), Conflicts: c.conflicts.Load()}
}

// SetRoundHook implements catalog.Probe.
func (s *Store) SetRoundHook(fn func(writers int)) {
	if fn == nil {
		s.c.roundHook.Store(nil)
		return
	}
	s.c.roundHook.Store(&fn)
}

// Queued implements catalog.Probe.
func (s *Store) Queued() int {
	s.c.mu.Lock()
	defer s.c.mu.Unlock()
	return len(s.c.queue)
}

// Stopping implements catalog.Probe.
func (s *Store) Stopping() bool { return s.c.isStopped() }

// Commit applies b atomically through the batching committer. See
// catalog.Store.Commit. Errors: catalog.ErrConflict, catalog.ErrTooLarge
// (naming the limit, before anything is written), catalog.ErrInvalid,
// catalog.ErrClosed, catalog.ErrFenced (a fenced store whose term is
// over), ctx's error while queued, or an etcd error (a timeout has an
// unknown outcome).
func (s *Store) Commit(ctx context.Context, b *catalog.Batch) (catalog.Version, error) {
	ctx, span := s.tracer.Start(ctx, "catalog.Commit", trace.WithSpanKind(trace.SpanKindInternal))
	defer span.End()
	span.SetAttributes(attribute.String("catalog.backend", "etcd"))
	if b != nil {
		span.SetAttributes(attribute.Int("catalog.ops", len(b.Ops)), attribute.Int("catalog.checks", len(b.Checks)+len(b.RangeChecks)))
	}
	r := s.c.submit(ctx, b, false)
	if r.err != nil {
		span.RecordError(r.err)
		span.SetStatus(codes.Error, r.err.Error())
	} else {
		span.SetAttributes(attribute.Int64("catalog.version", int64(r.ver)), attribute.Int("catalog.round.writers", r.writers))
	}
	return r.ver, r.err
}

// prepare validates b and computes its ops, generation keys and cost.
func (c *committer) prepare(b *catalog.Batch, internal bool) (*request, error) {
	s := c.s
	if b == nil {
		return nil, fmt.Errorf("%w: nil batch", catalog.ErrInvalid)
	}
	req := &request{b: b, done: make(chan result, 1)}
	last := map[string]int{}
	for i, op := range b.Ops {
		if err := s.validateKey(op.Key, internal); err != nil {
			return nil, fmt.Errorf("op %d: %w", i, err)
		}
		if !op.Delete && len(op.Value) > s.opts.MaxValueSize {
			return nil, fmt.Errorf("%w: op %d: value of %q is %d bytes, limit is %d (max_value_size)", catalog.ErrTooLarge, i, op.Key, len(op.Value), s.opts.MaxValueSize)
		}
		if j, ok := last[string(op.Key)]; ok {
			req.ops[j] = op
			continue
		}
		last[string(op.Key)] = len(req.ops)
		req.ops = append(req.ops, op)
	}
	gens := map[string]bool{}
	for _, op := range req.ops {
		if op.Delete {
			for _, d := range dirsOf(op.Key) {
				gens[s.gpre+d] = true
			}
		}
		req.cost.n++
		req.cost.bytes += len(s.kpre) + len(op.Key) + len(op.Value) + 16
	}
	for g := range gens {
		req.gens = append(req.gens, g)
		req.cost.n++
		req.cost.bytes += len(g) + 16
	}
	sort.Strings(req.gens)
	for i, ch := range b.Checks {
		if len(ch.Key) == 0 {
			return nil, fmt.Errorf("%w: check %d: empty key", catalog.ErrInvalid, i)
		}
		req.cost.n++
		req.cost.bytes += len(s.kpre) + len(ch.Key) + 24
	}
	for i, rc := range b.RangeChecks {
		if rc.End != nil && bytes.Compare(rc.Start, rc.End) > 0 {
			return nil, fmt.Errorf("%w: range check %d: start %q > end %q", catalog.ErrInvalid, i, rc.Start, rc.End)
		}
		req.cost.n += 2
		req.cost.bytes += 2*len(s.kpre) + len(rc.Start) + len(rc.End) + len(s.gpre) + len(rangeDir(rc.Start, rc.End)) + 64
	}
	maxN, maxBytes := c.budget()
	if req.cost.n > maxN || req.cost.bytes > maxBytes {
		return nil, fmt.Errorf("%w: %d ops, %d checks and %d range checks of about %d bytes need %d etcd txn entries (compares + ops, deletes also bump range generations); one etcd txn holds at most %d (etcd --max-txn-ops / catalog.etcd.max_txn_ops %d, one entry kept for the term fence) and %d bytes (--max-request-bytes %d minus framing); split the update",
			catalog.ErrTooLarge, len(b.Ops), len(b.Checks), len(b.RangeChecks), req.cost.bytes, req.cost.n, maxN, s.opts.MaxTxnOps, maxBytes, s.opts.MaxRequestBytes)
	}
	return req, nil
}

// budget is what one txn may hold: entries (compares + ops; one is kept
// for the fence compare) and request bytes.
func (c *committer) budget() (n, bytes int) {
	return c.s.opts.MaxTxnOps - 1, c.s.opts.MaxRequestBytes - requestMargin
}

func (c *committer) submit(ctx context.Context, b *catalog.Batch, internal bool) result {
	fail := func(err error) result { return result{err: err} }
	if err := ctx.Err(); err != nil {
		return fail(err)
	}
	req, err := c.prepare(b, internal)
	if err != nil {
		return fail(err)
	}
	if c.s.fence != nil && c.s.fenced.Load() {
		return fail(c.s.fencedErr())
	}
	c.mu.Lock()
	if c.stopped {
		c.mu.Unlock()
		return fail(catalog.ErrClosed)
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
		case <-c.quit:
			c.mu.Lock()
			q := c.queue
			c.queue = nil
			c.mu.Unlock()
			for _, r := range q {
				r.done <- result{err: catalog.ErrClosed}
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

// maxRaces is how often a writer's txn may lose a race with a writer
// outside this committer (its compares failed although the writer's
// checks held when read) before the writer fails with ErrConflict.
const maxRaces = 8

// round commits one round: validate, pack into txns, commit, repeat for
// what is left. See doc.go "Committer".
func (c *committer) round(q []*request) {
	start := time.Now()
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
	nwriters := len(reqs)
	var conflicts int64
	txns := 0
	var failed error
	deliver := func(rs []*request, res result) {
		for _, r := range rs {
			r.done <- res
		}
	}
	pending := reqs
	for len(pending) > 0 {
		if c.s.fence != nil && c.s.fenced.Load() {
			failed = c.s.fencedErr()
			deliver(pending, result{err: failed})
			break
		}
		cand := c.candidates(pending)
		st, err := c.read(cand)
		for i := 0; i < 3 && errors.Is(err, rpctypes.ErrCompacted); i++ {
			// Compacted between two read txns of one round: read again
			// at a fresh revision.
			st, err = c.read(cand)
		}
		if err != nil {
			failed = err
			deliver(pending, result{err: err})
			break
		}
		if st.fenced {
			c.s.markFenced()
			failed = c.s.fencedErr()
			deliver(pending, result{err: failed})
			break
		}
		chunk, used := c.pack(cand, st, func(r *request, err error) {
			conflicts++
			c.conflicts.Add(1)
			r.done <- result{err: err}
		})
		pending = pending[used:]
		if len(chunk) == 0 {
			continue
		}
		if c.afterRead != nil {
			c.afterRead()
		}
		ver, outcome, err := c.commitChunk(chunk, st.rev)
		switch outcome {
		case outcomeOK:
			txns++
			c.committed.Add(uint64(len(chunk)))
			deliver(chunk, result{ver: ver, writers: nwriters})
		case outcomeFenced:
			failed = err
			deliver(chunk, result{err: err})
			deliver(pending, result{err: err})
			pending = nil
		case outcomeRaced:
			var again []*request
			for _, r := range chunk {
				if r.retries++; r.retries > maxRaces {
					conflicts++
					c.conflicts.Add(1)
					r.done <- result{err: fmt.Errorf("%w: the commit lost %d races with writers outside this store", catalog.ErrConflict, maxRaces)}
					continue
				}
				again = append(again, r)
			}
			pending = append(again, pending...)
		default:
			failed = err
			deliver(chunk, result{err: err})
			deliver(pending, result{err: err})
			pending = nil
		}
	}
	c.s.met.round(time.Since(start), nwriters, txns, conflicts, failed != nil)
}

// candidates returns the prefix of pending that could share one txn by
// budget (at least one writer).
func (c *committer) candidates(pending []*request) []*request {
	maxN, maxBytes := c.budget()
	var n, b int
	for i, r := range pending {
		if i > 0 && (n+r.cost.n > maxN || b+r.cost.bytes > maxBytes) {
			return pending[:i]
		}
		n += r.cost.n
		b += r.cost.bytes
	}
	return pending
}

// readState is what the keys and ranges the candidates check looked like
// at one revision.
type readState struct {
	rev    int64
	fenced bool                       // a fenced store's term was over at rev
	keys   map[string]catalog.Version // catalog key -> version (0 absent)
	ranges map[*catalog.RangeCheck][]catalog.KeyVersion
}

// read fetches, at one revision, every key checked by cand and the
// records of every range checked (keys only; at most len(Seen)+1 plus the
// deletes of cand, which is enough to tell an unchanged range from a
// changed one). Reads go in read-only txns of at most MaxTxnOps.
func (c *committer) read(cand []*request) (*readState, error) {
	s := c.s
	st := &readState{keys: map[string]catalog.Version{}, ranges: map[*catalog.RangeCheck][]catalog.KeyVersion{}}
	type item struct {
		key   string
		rc    *catalog.RangeCheck
		lim   int64
		fence bool // the fence key
	}
	var items []item
	deletes := 0
	for _, r := range cand {
		for _, op := range r.ops {
			if op.Delete {
				deletes++
			}
		}
	}
	seen := map[string]bool{}
	for _, r := range cand {
		for _, ch := range r.b.Checks {
			if !seen[string(ch.Key)] {
				seen[string(ch.Key)] = true
				items = append(items, item{key: string(ch.Key)})
			}
		}
		for i := range r.b.RangeChecks {
			rc := &r.b.RangeChecks[i]
			items = append(items, item{rc: rc, lim: int64(len(rc.Seen) + 1 + deletes)})
		}
	}
	if len(items) == 0 {
		return st, nil
	}
	if s.fence != nil {
		// Read the term too: a writer of an old term is told it is
		// fenced, not that its checks conflict.
		items = append(items, item{fence: true})
	}
	for len(items) > 0 {
		n := min(len(items), s.opts.MaxTxnOps)
		part := items[:n]
		items = items[n:]
		ops := make([]clientv3.Op, 0, n)
		for _, it := range part {
			o := []clientv3.OpOption{clientv3.WithKeysOnly()}
			if st.rev != 0 {
				o = append(o, clientv3.WithRev(st.rev))
			}
			if it.fence {
				ops = append(ops, clientv3.OpGet(s.fence.Key, o...))
				continue
			}
			if it.rc == nil {
				ops = append(ops, clientv3.OpGet(s.ekey([]byte(it.key)), o...))
				continue
			}
			o = append(o, clientv3.WithRange(s.endKey(it.rc.End)), clientv3.WithLimit(it.lim))
			ops = append(ops, clientv3.OpGet(s.ekey(it.rc.Start), o...))
		}
		ctx, cancel := s.rctx(context.Background())
		resp, err := s.cli.Txn(ctx).Then(ops...).Commit()
		cancel()
		if err != nil {
			return nil, etcdErr("read checked keys", err)
		}
		if st.rev == 0 {
			st.rev = resp.Header.Revision
		}
		for i, it := range part {
			kvs := resp.Responses[i].GetResponseRange().Kvs
			if it.fence {
				st.fenced = len(kvs) == 0 || kvs[0].CreateRevision != s.fence.Revision
				continue
			}
			if it.rc == nil {
				if len(kvs) > 0 {
					st.keys[it.key] = catalog.Version(kvs[0].ModRevision)
				} else {
					st.keys[it.key] = 0
				}
				continue
			}
			list := make([]catalog.KeyVersion, 0, len(kvs))
			for _, kv := range kvs {
				list = append(list, catalog.KeyVersion{Key: bytes.TrimPrefix(kv.Key, []byte(s.kpre)), Version: catalog.Version(kv.ModRevision)})
			}
			st.ranges[it.rc] = list
		}
	}
	return st, nil
}

// pack validates cand in order against st overlaid with the writes of the
// writers accepted before it (a key written earlier has a version nobody
// can have seen; a deleted key is absent). A writer that fails is answered
// through conflict and dropped. The chunk ends before the first writer
// that passes but touches (checks, scans or writes) a key written by the
// chunk: an etcd txn evaluates compares before its ops and may not write
// a key twice, so such a writer goes to the next txn (validated again
// then). pack returns the chunk and how many of cand it consumed.
func (c *committer) pack(cand []*request, st *readState, conflict func(*request, error)) ([]*request, int) {
	overlay := map[string]bool{} // key -> deleted
	var chunk []*request
	for i, r := range cand {
		if err := validate(st, overlay, r.b); err != nil {
			conflict(r, err)
			continue
		}
		if len(chunk) > 0 && touches(overlay, r) {
			return chunk, i
		}
		chunk = append(chunk, r)
		for _, op := range r.ops {
			overlay[string(op.Key)] = op.Delete
		}
	}
	return chunk, len(cand)
}

func touches(overlay map[string]bool, r *request) bool {
	for _, ch := range r.b.Checks {
		if _, ok := overlay[string(ch.Key)]; ok {
			return true
		}
	}
	for _, op := range r.ops {
		if _, ok := overlay[string(op.Key)]; ok {
			return true
		}
	}
	for _, rc := range r.b.RangeChecks {
		for k := range overlay {
			if catalog.InRange([]byte(k), rc.Start, rc.End) {
				return true
			}
		}
	}
	return false
}

func validate(st *readState, overlay map[string]bool, b *catalog.Batch) error {
	for _, ch := range b.Checks {
		got := st.keys[string(ch.Key)]
		if del, ok := overlay[string(ch.Key)]; ok {
			got = catalog.PendingVersion
			if del {
				got = 0
			}
		}
		if err := catalog.CheckVersion(ch, got); err != nil {
			return err
		}
	}
	for i := range b.RangeChecks {
		rc := &b.RangeChecks[i]
		now := map[string]catalog.Version{}
		for _, kv := range st.ranges[rc] {
			now[string(kv.Key)] = kv.Version
		}
		for k, del := range overlay {
			if !catalog.InRange([]byte(k), rc.Start, rc.End) {
				continue
			}
			if del {
				delete(now, k)
			} else {
				now[k] = catalog.PendingVersion
			}
		}
		if err := catalog.CheckRangeSeen(*rc, now); err != nil {
			return err
		}
	}
	return nil
}

type outcome int

const (
	outcomeOK outcome = iota
	outcomeRaced
	outcomeFenced
	outcomeError
)

// commitChunk writes chunk in one etcd txn whose compares say that what
// the writers checked is still as read at rev (and, on a fenced store,
// that the term is current).
func (c *committer) commitChunk(chunk []*request, rev int64) (catalog.Version, outcome, error) {
	s := c.s
	var cmps []clientv3.Cmp
	var ops []clientv3.Op
	gens := map[string]bool{}
	for _, r := range chunk {
		for _, ch := range r.b.Checks {
			k := s.ekey(ch.Key)
			if ch.Version == 0 {
				cmps = append(cmps, clientv3.Compare(clientv3.CreateRevision(k), "=", 0))
			} else {
				cmps = append(cmps, clientv3.Compare(clientv3.ModRevision(k), "=", int64(ch.Version)))
			}
		}
		for _, rc := range r.b.RangeChecks {
			// Nothing in the range was written after rev (inserts and
			// updates), and nothing under its directory was deleted after
			// rev (its generation did not move).
			cmps = append(cmps,
				clientv3.Compare(clientv3.ModRevision(s.ekey(rc.Start)), "<", rev+1).WithRange(s.endKey(rc.End)),
				clientv3.Compare(clientv3.ModRevision(s.gpre+rangeDir(rc.Start, rc.End)), "<", rev+1))
		}
		for _, op := range r.ops {
			if op.Delete {
				ops = append(ops, clientv3.OpDelete(s.ekey(op.Key)))
			} else {
				ops = append(ops, clientv3.OpPut(s.ekey(op.Key), string(op.Value)))
			}
		}
		for _, g := range r.gens {
			if !gens[g] {
				gens[g] = true
				ops = append(ops, clientv3.OpPut(g, ""))
			}
		}
	}
	var els []clientv3.Op
	if s.fence != nil {
		cmps = append(cmps, clientv3.Compare(clientv3.CreateRevision(s.fence.Key), "=", s.fence.Revision))
		els = append(els, clientv3.OpGet(s.fence.Key, clientv3.WithKeysOnly()))
	}
	ctx, cancel := s.rctx(context.Background())
	defer cancel()
	resp, err := s.cli.Txn(ctx).If(cmps...).Then(ops...).Else(els...).Commit()
	if err != nil {
		return 0, outcomeError, etcdErr(fmt.Sprintf("commit of %d writers (%d ops; outcome unknown if this is a timeout)", len(chunk), len(ops)), err)
	}
	if resp.Succeeded {
		if len(ops) > 0 {
			c.txns.Add(1)
		}
		return catalog.Version(resp.Header.Revision), outcomeOK, nil
	}
	if s.fence != nil && isFenced(resp, s.fence) {
		s.markFenced()
		return 0, outcomeFenced, s.fencedErr()
	}
	return 0, outcomeRaced, nil
}

// isFenced tells a failed fence compare (the txn's Else branch read the
// election key) from a failed version compare.
func isFenced(resp *clientv3.TxnResponse, f *Fence) bool {
	if len(resp.Responses) == 0 {
		return true
	}
	rr, ok := resp.Responses[0].Response.(*pb.ResponseOp_ResponseRange)
	if !ok {
		return true
	}
	kvs := rr.ResponseRange.Kvs
	return len(kvs) == 0 || kvs[0].CreateRevision != f.Revision
}

// genDepth bounds how many directory levels a delete bumps: deeper ranges
// share the generation of their ancestor at this depth.
const genDepth = 4

// dirsOf returns the directories whose generation a delete of k bumps:
// "" and every prefix of k ending in "/", at most genDepth of them.
func dirsOf(k []byte) []string {
	out := []string{""}
	for i, b := range k {
		if b == '/' {
			out = append(out, string(k[:i+1]))
			if len(out) > genDepth {
				break
			}
		}
	}
	return out
}

// rangeDir returns the directory whose generation covers every key of
// [start, end): the longest common prefix of the range's keys, cut after
// its last "/" and to genDepth levels.
func rangeDir(start, end []byte) string {
	if end == nil {
		return ""
	}
	cp := start
	if !bytes.Equal(end, prefixEnd(start)) {
		n := 0
		for n < len(start) && n < len(end) && start[n] == end[n] {
			n++
		}
		cp = start[:n]
	}
	cut := bytes.LastIndexByte(cp, '/') + 1
	cp = cp[:cut]
	levels := 0
	for i, b := range cp {
		if b == '/' {
			if levels++; levels == genDepth {
				return string(cp[:i+1])
			}
		}
	}
	return string(cp)
}

// prefixEnd is the smallest key after every key starting with p (nil when
// there is none).
func prefixEnd(p []byte) []byte {
	end := bytes.Clone(p)
	for i := len(end) - 1; i >= 0; i-- {
		if end[i] < 0xff {
			end[i]++
			return end[:i+1]
		}
	}
	return nil
}

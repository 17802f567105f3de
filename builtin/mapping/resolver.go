package mapping

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"time"

	"go.opentelemetry.io/otel/attribute"

	"github.com/hostd-dev/hostd/runtime/catalog"
	"github.com/hostd-dev/hostd/runtime/wal"
)

var _ wal.Resolver = (*Mapping)(nil)

func (m *Mapping) parse(vchannel string) (string, int, error) {
	t, q, err := ParseVChannel(vchannel)
	if err != nil {
		return "", 0, fmt.Errorf("%w: %v", wal.ErrNoChannel, err)
	}
	return t, q, nil
}

// Check implements wal.Resolver: nil if vchannel is an existing logic
// queue "topic/N".
func (m *Mapping) Check(ctx context.Context, vchannel string) error {
	t, q, err := m.parse(vchannel)
	if err != nil {
		return err
	}
	_, err = m.queueOf(ctx, t, q)
	return err
}

// AppendOptions carry producer idempotency: a retried append with the same
// (ProducerID, Seq) returns the original positions instead of appending
// twice. Seq must increase per producer and logic queue.
type AppendOptions struct {
	ProducerID string
	Seq        uint64
}

// Append implements wal.Resolver: it appends to the logic queue's leader
// segment and returns logic offsets.
func (m *Mapping) Append(ctx context.Context, vchannel string, recs []wal.Record) ([]wal.Position, error) {
	pos, _, err := m.AppendOpts(ctx, vchannel, recs, AppendOptions{})
	return pos, err
}

// AppendOpts is Append with producer idempotency. dup reports a retried
// (producer, seq) whose original positions are returned.
// Errors: wal.ErrNoChannel, ErrSequence, ErrInvalid, WAL errors.
func (m *Mapping) AppendOpts(ctx context.Context, vchannel string, recs []wal.Record, o AppendOptions) (pos []wal.Position, dup bool, err error) {
	ctx, end := m.span(ctx, "append", attribute.String("hostd.vchannel", vchannel), attribute.Int("hostd.records", len(recs)))
	defer end(&err)
	t, id, err := m.parse(vchannel)
	if err != nil {
		return nil, false, err
	}
	if o.ProducerID != "" {
		return m.appendIdempotent(ctx, vchannel, t, id, recs, o)
	}
	if m.log != nil {
		pos, _, err = m.appendLog(ctx, vchannel, t, id, withIDs(vchannel, recs), nil, false)
		if err == nil {
			m.met.appends.Add(ctx, int64(len(pos)))
		}
		return pos, false, err
	}
	pos, err = m.appendLeader(ctx, vchannel, t, id, recs, nil)
	return pos, false, err
}

// appendLeader appends to the current leader, following remaps: a sealed
// leader (ErrSealed) means a remap committed, so the cache is refreshed and
// the append goes to the new leader. Every append thus lands either in the
// old segment before its end was fixed, or in the new one.
func (m *Mapping) appendLeader(ctx context.Context, vchannel, topic string, id int, recs []wal.Record,
	extra func(first uint64, ents []wal.Entry) []catalog.Op) ([]wal.Position, error) {
	for attempt := 0; ; attempt++ {
		if err := m.waitHold(ctx, vchannel, topic, id); err != nil {
			return nil, err
		}
		q, err := m.queueOf(ctx, topic, id)
		if err != nil {
			return nil, err
		}
		lead := *q.Leader()
		pq := lead.PhysicalQueue()
		var ex func([]wal.Entry) []catalog.Op
		if extra != nil {
			ex = func(ents []wal.Entry) []catalog.Op {
				return extra(lead.LogicOffset+ents[0].Offset-lead.StartOffset, ents)
			}
		}
		ents, err := m.w.AppendWith(ctx, pq, recs, ex)
		if (errors.Is(err, wal.ErrSealed) || errors.Is(err, wal.ErrNoQueue)) && attempt < 50 {
			if rerr := m.refreshQueue(ctx, topic, id); rerr != nil {
				return nil, rerr
			}
			continue
		}
		if err != nil {
			return nil, err
		}
		out := make([]wal.Position, len(ents))
		for i, e := range ents {
			out[i] = wal.Position{VChannel: vchannel, Offset: lead.LogicOffset + e.Offset - lead.StartOffset,
				Queue: pq, QueueOffset: e.Offset, Tick: e.Tick}
		}
		m.met.appends.Add(ctx, int64(len(out)))
		return out, nil
	}
}

var (
	_ wal.MultiAppender = (*Mapping)(nil)
	_ wal.NextHinter    = (*Mapping)(nil)
)

// AppendMulti implements wal.MultiAppender: each vchannel's records go to
// its logic queue's leader segment, all in one catalog commit. A sealed
// leader (a remap committed) refreshes that queue and retries the whole
// call — nothing of a failed attempt was appended. In Log mode there is no
// such commit: it fails with ErrInvalid (hand the broadcast engine
// Resolver(), which is no MultiAppender there).
func (m *Mapping) AppendMulti(ctx context.Context, batches []wal.ChannelRecords, extra []catalog.Op) (out [][]wal.Position, err error) {
	ctx, end := m.span(ctx, "append", attribute.Int("hostd.vchannels", len(batches)))
	defer end(&err)
	if m.log != nil {
		return nil, fmt.Errorf("%w: atomic multi-vchannel appends need the embedded WAL (mapping.Config.WAL); with a Log, append one vchannel at a time (Mapping.Resolver)", ErrInvalid)
	}
	type target struct {
		topic string
		id    int
	}
	tg := make([]target, len(batches))
	for i, b := range batches {
		t, id, err := m.parse(b.VChannel)
		if err != nil {
			return nil, &wal.PartError{Index: i, Queue: b.VChannel, Err: err}
		}
		tg[i] = target{t, id}
	}
	parts := make([]wal.Part, len(batches))
	leads := make([]Segment, len(batches))
	for attempt := 0; ; attempt++ {
		for i, b := range batches {
			if err := m.waitHold(ctx, b.VChannel, tg[i].topic, tg[i].id); err != nil {
				return nil, err
			}
			q, err := m.queueOf(ctx, tg[i].topic, tg[i].id)
			if err != nil {
				return nil, &wal.PartError{Index: i, Queue: b.VChannel, Err: err}
			}
			leads[i] = *q.Leader()
			parts[i] = wal.Part{Queue: leads[i].PhysicalQueue(), Recs: b.Recs}
		}
		if len(extra) > 0 && len(parts) > 0 {
			parts[0].Extra = func([]wal.Entry) []catalog.Op { return extra }
		}
		ents, err := m.w.AppendMulti(ctx, parts)
		var pe *wal.PartError
		if errors.As(err, &pe) {
			i := pe.Index
			if (errors.Is(pe.Err, wal.ErrSealed) || errors.Is(pe.Err, wal.ErrNoQueue)) && attempt < 50 {
				if rerr := m.refreshQueue(ctx, tg[i].topic, tg[i].id); rerr != nil {
					return nil, &wal.PartError{Index: i, Queue: batches[i].VChannel, Err: rerr}
				}
				continue
			}
			return nil, &wal.PartError{Index: i, Queue: batches[i].VChannel, Err: pe.Err}
		}
		if err != nil {
			return nil, err
		}
		out = make([][]wal.Position, len(ents))
		n := 0
		for i, es := range ents {
			lead, pq := leads[i], parts[i].Queue
			out[i] = make([]wal.Position, len(es))
			for j, e := range es {
				out[i][j] = wal.Position{VChannel: batches[i].VChannel, Offset: lead.LogicOffset + e.Offset - lead.StartOffset,
					Queue: pq, QueueOffset: e.Offset, Tick: e.Tick}
			}
			n += len(es)
		}
		m.met.appends.Add(ctx, int64(n))
		return out, nil
	}
}

// NextHint implements wal.NextHinter from the cached mapping and the WAL's
// cached queue state. A stale cache only makes it lower: logic offsets
// never go back, and a superseded leader's end is at most the new
// leader's start.
func (m *Mapping) NextHint(ctx context.Context, vchannel string) (uint64, error) {
	t, id, err := m.parse(vchannel)
	if err != nil {
		return 0, err
	}
	q, err := m.queueOf(ctx, t, id)
	if err != nil {
		return 0, err
	}
	lead := q.Leader()
	n, err := m.phys().NextHint(ctx, lead.PhysicalQueue())
	if err != nil || n < lead.StartOffset {
		_, max, err := m.Bounds(ctx, vchannel)
		return max, err
	}
	return lead.LogicOffset + n - lead.StartOffset, nil
}

// waitHold blocks while a remap of vchannel is being committed.
func (m *Mapping) waitHold(ctx context.Context, vchannel, topic string, id int) error {
	for {
		m.mu.RLock()
		h := m.holds[vchannel]
		var until time.Time
		if h != nil {
			until = h.until
		}
		m.mu.RUnlock()
		if h == nil {
			return nil
		}
		now := m.cfg.Clock.Now()
		if !now.Before(until) {
			m.mu.Lock()
			if m.holds[vchannel] == h {
				delete(m.holds, vchannel)
				close(h.ch)
			}
			m.mu.Unlock()
			return nil
		}
		wait := until.Sub(now)
		if wait > 20*time.Millisecond {
			wait = 20 * time.Millisecond
		}
		select {
		case <-h.ch:
		case <-time.After(wait):
			// The remap may have been committed by the broadcast engine:
			// Refresh releases the hold once the new leader is visible.
			if err := m.refreshQueue(ctx, topic, id); err != nil {
				return err
			}
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// segEnd returns the exclusive logic end of segment s given its physical
// bounds.
func segEnd(s Segment, b wal.Bounds) uint64 {
	if s.Closed() {
		return s.LogicOffset + s.Len()
	}
	return s.LogicOffset + b.Max - s.StartOffset
}

type qview struct {
	q      *LogicQueue
	bounds []wal.Bounds
	min    uint64
	max    uint64
	first  int // first segment that still holds data (or the leader)
}

// view reads a logic queue from r and its segments' physical bounds (from
// r in WAL mode, from the Log in Log mode: see segBounds).
func (m *Mapping) view(ctx context.Context, r catalog.Reader, topic string, id int) (*qview, error) {
	v, _, err := r.Get(queueKey(topic, id))
	if errors.Is(err, catalog.ErrNotFound) {
		return nil, fmt.Errorf("%w: %q", wal.ErrNoChannel, VChannel(topic, id))
	}
	if err != nil {
		return nil, err
	}
	q, err := decodeQueue(queueKey(topic, id), v)
	if err != nil {
		return nil, err
	}
	if len(q.Segments) == 0 {
		return nil, &InvariantError{Topic: topic, Queue: id, Segment: -1, Reason: "no segments"}
	}
	qv := &qview{q: q, bounds: make([]wal.Bounds, len(q.Segments)), first: -1}
	for i, s := range q.Segments {
		b, err := m.segBounds(ctx, r, s)
		if err != nil {
			if errors.Is(err, wal.ErrNoQueue) && s.Closed() {
				// Retention removed it but has not dropped the segment yet.
				e := *s.EndOffset
				b = wal.Bounds{Min: e, Max: e, Sealed: true}
			} else if errors.Is(err, wal.ErrNoQueue) && m.log != nil {
				// Log mode reads the queues after the snapshot: the topic
				// was deleted (its queues with it) meanwhile.
				return nil, fmt.Errorf("%w: %q", wal.ErrNoChannel, VChannel(topic, id))
			} else {
				return nil, fmt.Errorf("mapping: %s segment %d: %w", VChannel(topic, id), i, err)
			}
		}
		qv.bounds[i] = b
		last := i == len(q.Segments)-1
		if qv.first < 0 && (last || b.Min < *s.EndOffset) {
			qv.first = i
			mn := b.Min
			if mn < s.StartOffset {
				mn = s.StartOffset
			}
			qv.min = s.LogicOffset + mn - s.StartOffset
		}
	}
	lead := q.Segments[len(q.Segments)-1]
	qv.max = segEnd(lead, qv.bounds[len(q.Segments)-1])
	return qv, nil
}

// Bounds implements wal.Resolver: the retained logic range [min, max).
func (m *Mapping) Bounds(ctx context.Context, vchannel string) (min, max uint64, err error) {
	t, id, err := m.parse(vchannel)
	if err != nil {
		return 0, 0, err
	}
	err = m.store.View(ctx, func(r catalog.Reader) error {
		qv, err := m.view(ctx, r, t, id)
		if err != nil {
			return err
		}
		min, max = qv.min, qv.max
		return nil
	})
	return min, max, err
}

// Read implements wal.Resolver: up to limit messages from logic offset
// from, continuing across segment boundaries. Errors: wal.ErrNoChannel,
// *RangeError (from < min or from > max; matches ErrOutOfRange and
// wal.ErrOutOfRange).
func (m *Mapping) Read(ctx context.Context, vchannel string, from uint64, limit int) (out []wal.Message, err error) {
	ctx, end := m.span(ctx, "read", attribute.String("hostd.vchannel", vchannel), attribute.Int64("hostd.from", int64(from)))
	defer end(&err)
	t, id, err := m.parse(vchannel)
	if err != nil {
		return nil, err
	}
	if limit <= 0 {
		return nil, fmt.Errorf("%w: limit must be > 0", ErrInvalid)
	}
	err = m.store.View(ctx, func(r catalog.Reader) error {
		out, err = m.readView(ctx, r, vchannel, t, id, from, limit)
		return err
	})
	m.met.reads.Add(ctx, int64(len(out)))
	return out, err
}

// readView reads from one snapshot. In Log mode physical offsets may have
// gaps (a Log's own records, e.g. JetStream fences, take offsets and reads
// skip them): a read from an offset in a gap returns the next message, and
// a segment is done when a read returns fewer entries than asked.
func (m *Mapping) readView(ctx context.Context, r catalog.Reader, vchannel, t string, id int, from uint64, limit int) ([]wal.Message, error) {
	qv, err := m.view(ctx, r, t, id)
	if err != nil {
		return nil, err
	}
	if from < qv.min || from > qv.max {
		return nil, &RangeError{VChannel: vchannel, Offset: from, Min: qv.min, Max: qv.max}
	}
	var out []wal.Message
	for i := qv.first; i < len(qv.q.Segments) && len(out) < limit; i++ {
		s := qv.q.Segments[i]
		e := segEnd(s, qv.bounds[i])
		if from >= e {
			continue
		}
		pq := s.PhysicalQueue()
		want := limit - len(out)
		ents, err := m.readPhys(ctx, r, pq, s.StartOffset+from-s.LogicOffset, want)
		if err != nil {
			return nil, fmt.Errorf("mapping: read %s segment %d (%s): %w", vchannel, i, pq, err)
		}
		for _, en := range ents {
			logic := s.LogicOffset + en.Offset - s.StartOffset
			if logic >= e {
				break // appended after the bounds were read (Log mode)
			}
			out = append(out, wal.Message{
				Position: wal.Position{VChannel: vchannel, Offset: logic, Queue: pq, QueueOffset: en.Offset, Tick: en.Tick},
				Payload:  en.Payload, Props: en.Props, Kind: en.Kind,
			})
		}
		if len(ents) >= want {
			break // limit reached inside this segment
		}
		from = e
	}
	return out, nil
}

// Wait implements wal.Resolver: blocks until the logic queue's max exceeds
// offset, following remaps, or ctx ends.
func (m *Mapping) Wait(ctx context.Context, vchannel string, offset uint64) error {
	t, id, err := m.parse(vchannel)
	if err != nil {
		return err
	}
	for {
		var qv *qview
		err := m.store.View(ctx, func(r catalog.Reader) error {
			var err error
			qv, err = m.view(ctx, r, t, id)
			return err
		})
		if err != nil {
			return err
		}
		if qv.max > offset {
			return nil
		}
		lead := qv.q.Segments[len(qv.q.Segments)-1]
		lb := qv.bounds[len(qv.bounds)-1]
		// Wake on the next append to the leader; re-resolve at least every
		// second so a remap committed elsewhere is followed.
		wctx, cancel := context.WithTimeout(ctx, time.Second)
		err = m.phys().Wait(wctx, lead.PhysicalQueue(), lb.Max)
		cancel()
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if err != nil && !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, wal.ErrSealed) && !errors.Is(err, wal.ErrNoQueue) {
			return err
		}
		if errors.Is(err, wal.ErrSealed) {
			_ = m.Refresh(ctx, t)
		}
	}
}

// LogicToPhysical translates a logic offset to (physical queue, offset)
// using the cached mapping (no catalog read). Offsets at or past the
// leader's logic offset map into the leader.
func (m *Mapping) LogicToPhysical(ctx context.Context, vchannel string, logic uint64) (string, uint64, error) {
	t, id, err := m.parse(vchannel)
	if err != nil {
		return "", 0, err
	}
	q, err := m.queueOf(ctx, t, id)
	if err != nil {
		return "", 0, err
	}
	s, ok := findSegment(q.Segments, logic)
	if !ok {
		return "", 0, &RangeError{VChannel: vchannel, Offset: logic, Min: q.Segments[0].LogicOffset, Max: logic}
	}
	return s.PhysicalQueue(), s.StartOffset + logic - s.LogicOffset, nil
}

// findSegment binary-searches the segment holding logic offset off.
func findSegment(segs []Segment, off uint64) (Segment, bool) {
	i := sort.Search(len(segs), func(i int) bool { return segs[i].LogicOffset > off }) - 1
	if i < 0 {
		return Segment{}, false
	}
	return segs[i], true
}

// PhysicalToLogic translates (physical queue, offset) to (vchannel, logic
// offset) using the cached mapping.
func (m *Mapping) PhysicalToLogic(ctx context.Context, queue string, off uint64) (string, uint64, error) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	for name, c := range m.topics {
		for _, q := range c.queues {
			for _, s := range q.Segments {
				if s.PhysicalQueue() != queue {
					continue
				}
				if off < s.StartOffset || (s.Closed() && off >= *s.EndOffset) {
					return "", 0, fmt.Errorf("%w: offset %d outside segment gen %d of %s", ErrOutOfRange, off, s.Gen, VChannel(name, q.ID))
				}
				return VChannel(name, q.ID), s.LogicOffset + off - s.StartOffset, nil
			}
		}
	}
	return "", 0, fmt.Errorf("%w: physical queue %q is not part of any topic", ErrNotFound, queue)
}

// OffsetForTime returns the logic offset of the first retained message at
// or after t (max if none): a binary search over the closed segments'
// last-message times, then within the segment by time tick.
func (m *Mapping) OffsetForTime(ctx context.Context, vchannel string, at time.Time) (off uint64, err error) {
	ctx, end := m.span(ctx, "offset_for_time", attribute.String("hostd.vchannel", vchannel))
	defer end(&err)
	t, id, err := m.parse(vchannel)
	if err != nil {
		return 0, err
	}
	tick := uint64(0)
	if ns := at.UnixNano(); ns > 0 {
		tick = uint64(ns)
	}
	err = m.store.View(ctx, func(r catalog.Reader) error {
		qv, err := m.view(ctx, r, t, id)
		if err != nil {
			return err
		}
		segs := qv.q.Segments[qv.first:]
		// First segment whose last message is at or after tick; the
		// leader (open, LastTick 0) always qualifies.
		i := sort.Search(len(segs), func(i int) bool {
			return !segs[i].Closed() || segs[i].LastTick >= tick
		})
		s := segs[i]
		b := qv.bounds[qv.first+i]
		hi := b.Max
		if s.Closed() {
			hi = *s.EndOffset
		}
		p, err := m.offsetAtTick(ctx, r, s.PhysicalQueue(), b.Min, max(hi, b.Min), tick)
		if err != nil {
			return err
		}
		off = s.LogicOffset + p - s.StartOffset
		if off < qv.min {
			off = qv.min
		}
		return nil
	})
	return off, err
}

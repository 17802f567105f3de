package mapping

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/hostd-dev/hostd/runtime/catalog"
	"github.com/hostd-dev/hostd/runtime/wal"
)

// This file holds what only Log mode (Config.Log) needs: physical
// queues on a wal.Log whose data is not in the catalog. doc.go ("Log
// mode") explains the design; the functions here say what each step
// relies on.

// phys returns the physical queues as a wal.Log (the embedded WAL is one
// too).
func (m *Mapping) phys() wal.Log {
	if m.log != nil {
		return m.log
	}
	return m.w
}

// changed tells the embedded WAL that a queue's records were written by
// a mapping commit (its cache is dropped, waiters wake). A Log keeps no
// such cache: nothing to do.
func (m *Mapping) changed(pq string) {
	if m.w != nil {
		m.w.Changed(pq)
	}
}

// termer is implemented by logs that write with a leadership term
// (jswal.Log.Term).
type termer interface{ Term() uint64 }

// term returns the Log's writer term and its Fencer, or 0 and nil.
func (m *Mapping) fencer() (wal.Fencer, uint64) {
	f, ok := m.log.(wal.Fencer)
	t, ok2 := m.log.(termer)
	if !ok || !ok2 || t.Term() == 0 {
		return nil, 0
	}
	return f, t.Term()
}

// orphanGrace is how long a physical queue created for a plan that has
// not committed (yet) is safe from the orphan sweep.
func (m *Mapping) orphanGrace() time.Duration {
	return max(time.Minute, 10*m.cfg.HoldTimeout)
}

// createLogQueue creates a new segment's physical queue on the Log
// before the plan that references it commits (ErrExists is fine: the
// create is idempotent). A writer with a term fences it at once, so the
// lazy fence of its first append does not take the segment's first
// offset: the segment starts after it. It returns the segment's physical
// start offset.
func (m *Mapping) createLogQueue(ctx context.Context, pq string) (uint64, error) {
	m.mu.Lock()
	m.pending[pq] = m.cfg.Clock.Now()
	m.mu.Unlock()
	var err error
	if p, ok := m.log.(Placer); ok && len(m.placementTags(pq)) > 0 {
		err = p.CreatePlaced(ctx, pq, m.placementTags(pq))
	} else {
		err = m.log.Create(ctx, pq)
	}
	if err != nil && !errors.Is(err, wal.ErrExists) {
		return 0, fmt.Errorf("mapping: create physical queue %s: %w", pq, err)
	}
	if f, term := m.fencer(); f != nil {
		if err := f.Fence(ctx, pq, term); err != nil {
			return 0, fmt.Errorf("mapping: fence new physical queue %s: %w", pq, err)
		}
	}
	b, err := m.log.Bounds(ctx, pq)
	if err != nil {
		return 0, fmt.Errorf("mapping: new physical queue %s: %w", pq, err)
	}
	return b.Max, nil
}

// committedQueues takes queues of a committed plan out of pending.
func (m *Mapping) committedQueues(qs []string) {
	m.mu.Lock()
	for _, q := range qs {
		delete(m.pending, q)
	}
	m.mu.Unlock()
}

// lastData returns the last entry (a record of the caller's, not one of
// the backend's own, which reads skip) in [lo, hi) of pq, reading
// backwards in growing windows; ok is false if there is none.
func (m *Mapping) lastData(ctx context.Context, pq string, lo, hi uint64) (e wal.Entry, ok bool, err error) {
	w := uint64(4)
	for hi > lo {
		from := lo
		if hi-lo > w {
			from = hi - w
		}
		ents, err := m.log.Read(ctx, pq, from, int(hi-from))
		var re *wal.RangeError
		if errors.As(err, &re) && from < re.Min {
			lo = re.Min // trimmed meanwhile
			continue
		}
		if err != nil {
			return wal.Entry{}, false, err
		}
		for _, en := range ents {
			if en.Offset < hi {
				e, ok = en, true
			}
		}
		if ok {
			return e, true, nil
		}
		hi = from
		w = min(4*w, 4096)
	}
	return wal.Entry{}, false, nil
}

// dataEnd is the end of an open leader's data in Log mode: one past its
// last entry, not counting the backend's records after it (a fence, a
// fence carried forward by Trim). Logic offsets thus never count a trailing
// fence, so a remap's closed end (the same computation after the seal)
// is never below a max reported before it. With no entry in [max(start,
// Min), Max) it is max(start, Min): nothing was appended, or everything
// was trimmed (Min is then past every entry, so it is still >= any max
// reported before).
func (m *Mapping) dataEnd(ctx context.Context, pq string, start uint64, b wal.Bounds) (uint64, wal.Entry, bool, error) {
	lo := max(start, b.Min)
	if b.Max <= lo {
		return max(lo, b.Max), wal.Entry{}, false, nil
	}
	e, ok, err := m.lastData(ctx, pq, lo, b.Max)
	if err != nil || !ok {
		return lo, e, false, err
	}
	return e.Offset + 1, e, true, nil
}

// segBounds returns segment s's physical bounds: from the snapshot r in
// WAL mode; from the Log in Log mode, where an open leader's Max is its
// dataEnd.
func (m *Mapping) segBounds(ctx context.Context, r catalog.Reader, s Segment) (wal.Bounds, error) {
	if m.log == nil {
		return wal.ReadBounds(r, s.PhysicalQueue())
	}
	b, err := m.log.Bounds(ctx, s.PhysicalQueue())
	if err != nil || s.Closed() {
		return b, err
	}
	end, _, _, err := m.dataEnd(ctx, s.PhysicalQueue(), s.StartOffset, b)
	b.Max = end
	return b, err
}

// readPhys reads physical entries: from the snapshot r in WAL mode, from
// the Log in Log mode (where offsets may have gaps).
func (m *Mapping) readPhys(ctx context.Context, r catalog.Reader, pq string, from uint64, limit int) ([]wal.Entry, error) {
	if m.log == nil {
		return wal.ReadFrom(r, pq, from, limit)
	}
	return m.log.Read(ctx, pq, from, limit)
}

// offsetAtTick returns the physical offset of the first entry of pq in
// [lo, hi) whose tick is >= tick, or hi if none (WAL mode: wal.OffsetAtTick
// on the snapshot). In Log mode it binary-searches on "the first entry at
// or after mid": monotone in mid even where offsets have gaps.
func (m *Mapping) offsetAtTick(ctx context.Context, r catalog.Reader, pq string, lo, hi, tick uint64) (uint64, error) {
	if m.log == nil {
		p, err := wal.OffsetAtTick(r, pq, tick)
		return min(max(p, lo), hi), err
	}
	ans := hi
	for lo < hi {
		mid := lo + (hi-lo)/2
		ents, err := m.log.Read(ctx, pq, mid, 1)
		if err != nil {
			return 0, err
		}
		switch {
		case len(ents) == 0 || ents[0].Offset >= hi:
			hi = mid // no entry in [mid, hi): the answer is below mid or stays
		case ents[0].Tick >= tick:
			ans, hi = ents[0].Offset, mid
		default:
			lo = ents[0].Offset + 1 // every entry up to it is older
		}
	}
	return ans, nil
}

// retainCutLog computes, in Log mode, where retention trims pq's range
// [lo, hi): below the first entry with a tick >= cutTick (if age), and
// below the oldest entries that fit budget bytes counted from the newest
// (if bytes), as wal.RecordSize counts them. It returns the cut and the
// bytes kept above it. Bytes are counted by reading the range: correct,
// not cheap (one pass per retention pass).
func (m *Mapping) retainCutLog(ctx context.Context, pq string, lo, hi uint64, age bool, cutTick uint64, bytes bool, budget uint64) (to, kept uint64, err error) {
	to = lo
	if age {
		o, err := m.offsetAtTick(ctx, nil, pq, lo, hi, cutTick)
		if err != nil {
			return 0, 0, err
		}
		to = max(to, o)
	}
	if !bytes {
		return to, 0, nil
	}
	type sized struct {
		off  uint64
		size uint64
	}
	var all []sized
	for at := lo; at < hi; {
		ents, err := m.log.Read(ctx, pq, at, 512)
		if err != nil {
			return 0, 0, err
		}
		n := 0
		for _, e := range ents {
			if e.Offset >= hi {
				break
			}
			all = append(all, sized{e.Offset, uint64(wal.RecordSize(wal.Record{Payload: e.Payload, Props: e.Props, ID: e.ID}))})
			n++
		}
		if n == 0 || n < len(ents) {
			break
		}
		at = ents[len(ents)-1].Offset + 1
	}
	bcut := lo
	var acc uint64
	for i := len(all) - 1; i >= 0; i-- {
		if acc+all[i].size > budget {
			bcut = all[i].off + 1
			break
		}
		acc += all[i].size
	}
	to = max(to, bcut)
	for _, s := range all {
		if s.off >= to {
			kept += s.size
		}
	}
	return to, kept, nil
}

// closeLeaderLog seals the open leader's queue on the Log (sealing a
// sealed queue returns its seal, so a retried plan gets the same answer)
// and returns the closed segment, or ok false if the leader never held an
// entry (it is dropped, as in WAL mode: closed segments are never empty).
//
// The closed end is the data end (see dataEnd), not Seal.End: a Log may
// write the seal, and fences, as records of its own that take offsets
// (jswal does), and counting them would put a gap in the logic offsets at
// every remap; the data end is also what Bounds reported as max while the
// segment was open, so no offset handed out is renumbered. A retried plan
// computes the same end: nothing is appended after the seal.
func (m *Mapping) closeLeaderLog(ctx context.Context, lead Segment, dry bool) (Segment, bool, error) {
	pq := lead.PhysicalQueue()
	var seal wal.Seal
	if !dry {
		var err error
		if seal, err = m.sealer.Seal(ctx, pq); err != nil {
			return lead, false, err
		}
	}
	b, err := m.log.Bounds(ctx, pq)
	if err != nil {
		return lead, false, err
	}
	if !dry {
		b.Max = max(b.Max, seal.End)
	}
	end, last, found, err := m.dataEnd(ctx, pq, lead.StartOffset, b)
	if err != nil {
		return lead, false, err
	}
	if !found && b.Min <= lead.StartOffset {
		return lead, false, nil // never held an entry
	}
	lead.EndOffset = &end
	lead.LastTick = seal.LastTick
	if found {
		lead.LastTick = last.Tick
	}
	if first, err := m.log.Read(ctx, pq, max(lead.StartOffset, b.Min), 1); err == nil && len(first) == 1 && first[0].Offset < end {
		lead.FirstTick = first[0].Tick
	}
	return lead, true, nil
}

// position turns an entry of segment s into a position of vchannel.
func position(vchannel string, s Segment, e wal.Entry) wal.Position {
	return wal.Position{VChannel: vchannel, Offset: s.LogicOffset + e.Offset - s.StartOffset,
		Queue: s.PhysicalQueue(), QueueOffset: e.Offset, Tick: e.Tick}
}

// withIDs returns recs with an ID on every record that a retry must be
// able to find: broadcast records get wal.BroadcastRecordID (as
// wal.LogDirect gives them, so the broadcast engine's reconcile, FindIDs
// and JetStream's duplicate window see the same IDs); the records of a
// multi-record batch without one get a random batch id and their index,
// so that a batch split by a remap's seal (a Log appends a batch record
// by record) is resumed, not appended twice. A single record without an
// ID needs none: a failed append of one record stored nothing.
func withIDs(vchannel string, recs []wal.Record) []wal.Record {
	out := make([]wal.Record, len(recs))
	var nonce string
	for i, r := range recs {
		if r.ID == "" {
			r.ID = wal.BroadcastRecordID(vchannel, r)
		}
		if r.ID == "" && len(recs) > 1 {
			if nonce == "" {
				var b [12]byte
				_, _ = rand.Read(b[:])
				nonce = "b/" + hex.EncodeToString(b[:]) + "/"
			}
			r.ID = nonce + strconv.Itoa(i)
		}
		out[i] = r
	}
	return out
}

// producerIDs returns the record IDs of a producer append: derived from
// (logic queue, producer, seq, index), so a retry in another process
// (after a failover) finds them. Bounded in length whatever the names.
func producerIDs(topic string, id int, pid string, seq uint64, recs []wal.Record) []wal.Record {
	h := sha256.Sum256([]byte(topic + "\x00" + strconv.Itoa(id) + "\x00" + pid))
	base := "p/" + hex.EncodeToString(h[:16]) + "/" + strconv.FormatUint(seq, 10) + "/"
	out := make([]wal.Record, len(recs))
	for i, r := range recs {
		r.ID = base + strconv.Itoa(i)
		out[i] = r
	}
	return out
}

// findLogic looks for recs (by ID) in the logic queue q from logic offset
// low on, across its segments (a record may sit in a segment a remap has
// closed since), and returns the positions of the leading records found.
// The records found must be a prefix of recs (a batch is appended in
// order); anything else is an error, since appending the missing ones now
// would reorder the batch. The leader is fenced first when the Log writes
// with a term, so no older writer can append after the scan.
func (m *Mapping) findLogic(ctx context.Context, vchannel string, q *LogicQueue, low uint64, recs []wal.Record) ([]wal.Position, error) {
	var ids []string
	for _, r := range recs {
		if r.ID != "" {
			ids = append(ids, r.ID)
		}
	}
	if len(ids) == 0 {
		return nil, nil
	}
	if f, term := m.fencer(); f != nil {
		if err := f.Fence(ctx, q.Leader().PhysicalQueue(), term); err != nil {
			return nil, err
		}
	}
	found := map[string]wal.Position{}
	for _, s := range q.Segments {
		if s.Closed() && s.LogicOffset+s.Len() <= low {
			continue
		}
		from := s.StartOffset
		if low > s.LogicOffset {
			from += low - s.LogicOffset
		}
		got, err := wal.FindIDs(ctx, m.log, s.PhysicalQueue(), from, ids)
		if errors.Is(err, wal.ErrNoQueue) && s.Closed() {
			continue // dropped by retention meanwhile
		}
		if err != nil {
			return nil, err
		}
		for id, e := range got {
			if s.Closed() && e.Offset >= *s.EndOffset {
				continue
			}
			if _, dup := found[id]; !dup {
				found[id] = position(vchannel, s, e)
			}
		}
	}
	var out []wal.Position
	for i, r := range recs {
		p, ok := found[r.ID]
		if !ok || r.ID == "" {
			for _, r2 := range recs[i+1:] {
				if _, ok := found[r2.ID]; ok && r2.ID != "" {
					return nil, fmt.Errorf("mapping: append to %s: record %q is there but %q before it is not", vchannel, r2.ID, r.ID)
				}
			}
			break
		}
		out = append(out, p)
	}
	return out, nil
}

// appendLog appends recs to the logic queue in Log mode. With scan set it
// first looks for recs already appended from logic offset low on
// (findLogic) and appends only the rest. A sealed leader (a remap) or a
// missing one refreshes the queue and retries with a scan, from the low
// mark taken before the first attempt: a Log may have stored a prefix of
// the batch before the seal, and that prefix stays where it is (in the
// closed segment, whose end is right after it) while the rest goes to
// the new leader. found is how many records were already there.
func (m *Mapping) appendLog(ctx context.Context, vchannel, topic string, id int, recs []wal.Record, low *uint64, scan bool) (out []wal.Position, found int, err error) {
	var stuck time.Time
	for attempt := 0; ; attempt++ {
		if err := m.waitHold(ctx, vchannel, topic, id); err != nil {
			return nil, 0, err
		}
		q, err := m.queueOf(ctx, topic, id)
		if err != nil {
			return nil, 0, err
		}
		lead := *q.Leader()
		pq := lead.PhysicalQueue()
		if low == nil {
			l := lead.LogicOffset
			if n, err := m.log.NextHint(ctx, pq); err == nil && n >= lead.StartOffset {
				l += n - lead.StartOffset
			}
			low = &l
		}
		out = out[:0]
		rest := recs
		if scan {
			if out, err = m.findLogic(ctx, vchannel, q, *low, recs); err != nil {
				return nil, 0, err
			}
			found = len(out)
			rest = recs[len(out):]
			if len(rest) == 0 {
				return out, found, nil
			}
		}
		ents, err := m.log.Append(ctx, pq, rest)
		if (errors.Is(err, wal.ErrSealed) || errors.Is(err, wal.ErrNoQueue)) && attempt < 1000 {
			if rerr := m.refreshQueue(ctx, topic, id); rerr != nil {
				return nil, 0, rerr
			}
			scan = true
			nq, qerr := m.queueOf(ctx, topic, id)
			if qerr != nil {
				return nil, 0, qerr
			}
			if nq.Leader().Gen == lead.Gen {
				// Sealed by a remap whose plan has not committed (yet): wait
				// for it, up to HoldTimeout.
				now := m.cfg.Clock.Now()
				if stuck.IsZero() {
					stuck = now
				} else if now.Sub(stuck) > m.cfg.HoldTimeout {
					return nil, 0, fmt.Errorf("mapping: append to %s: its leader %s is sealed but no remap committed within %v: %w", vchannel, pq, m.cfg.HoldTimeout, err)
				}
				select {
				case <-ctx.Done():
					return nil, 0, ctx.Err()
				case <-time.After(10 * time.Millisecond):
				}
			}
			continue
		}
		if err != nil {
			return nil, 0, err
		}
		for _, e := range ents {
			out = append(out, position(vchannel, lead, e))
		}
		return out, found, nil
	}
}

// Resolver returns what the host hands the broadcast engine: in WAL mode
// the mapping itself (a wal.MultiAppender: a broadcast's appends to
// several vchannels are one catalog commit); in Log mode a resolver that
// is not a MultiAppender (the engine then appends one vchannel at a time,
// as over wal.LogDirect) but is a wal.NextHinter. Either way broadcast
// records appended in Log mode carry wal.BroadcastRecordID as their ID.
func (m *Mapping) Resolver() wal.Resolver {
	if m.log == nil {
		return m
	}
	return logResolver{m: m}
}

// logResolver is the Log-mode resolver: the mapping without AppendMulti.
type logResolver struct{ m *Mapping }

var (
	_ wal.Resolver   = logResolver{}
	_ wal.NextHinter = logResolver{}
)

func (r logResolver) Check(ctx context.Context, vchannel string) error {
	return r.m.Check(ctx, vchannel)
}

func (r logResolver) Append(ctx context.Context, vchannel string, recs []wal.Record) ([]wal.Position, error) {
	return r.m.Append(ctx, vchannel, recs)
}

func (r logResolver) Read(ctx context.Context, vchannel string, from uint64, limit int) ([]wal.Message, error) {
	return r.m.Read(ctx, vchannel, from, limit)
}

func (r logResolver) Bounds(ctx context.Context, vchannel string) (uint64, uint64, error) {
	return r.m.Bounds(ctx, vchannel)
}

func (r logResolver) Wait(ctx context.Context, vchannel string, offset uint64) error {
	return r.m.Wait(ctx, vchannel, offset)
}

func (r logResolver) NextHint(ctx context.Context, vchannel string) (uint64, error) {
	return r.m.NextHint(ctx, vchannel)
}

// Placer is a Log that can place a new queue on servers carrying given
// tags (jswal: JetStream placement tags). In Log mode a segment's queue is
// created with its broker's labels as tags, "key:value" each, so brokers
// labelled by zone (az: a, b, c) on servers tagged az:a, az:b, az:c put
// every segment in its broker's zone, and zone-spread spreads them over
// real zones. A broker without labels places nothing (the Log's default
// placement).
type Placer interface {
	CreatePlaced(ctx context.Context, queue string, tags []string) error
}

// placementTags are the labels of pq's broker ("<broker>/<queue id>") as
// sorted "key:value" tags.
func (m *Mapping) placementTags(pq string) []string {
	broker, _, _ := strings.Cut(pq, "/")
	b, ok := m.brokers[broker] // set at Open, read-only after
	if !ok || len(b.Labels) == 0 {
		return nil
	}
	tags := make([]string, 0, len(b.Labels))
	for k, v := range b.Labels {
		tags = append(tags, k+":"+v)
	}
	sort.Strings(tags)
	return tags
}

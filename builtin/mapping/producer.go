package mapping

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"sync"

	"github.com/hostd-dev/hostd/runtime/catalog"
	"github.com/hostd-dev/hostd/runtime/failpoint"
	"github.com/hostd-dev/hostd/runtime/wal"
)

// MaxProducerID is the longest producer id accepted, in bytes.
const MaxProducerID = 128

// ProducerWindow is how many recent appends (sequence numbers) are
// remembered per producer and logic queue: a retry of any of them is a
// duplicate answered with its original positions, so a producer may have
// up to ProducerWindow appends in flight (pipelined) and retry any of
// them. A seq older than the window is ErrSequence.
const ProducerWindow = 16

// producer is one (logic queue, producer id)'s recent accepted appends.
// In WAL mode they are written in the same catalog commit as the entries
// (wal.AppendWith), so a crash cannot separate them. In Log mode they are
// committed after the append (see appendIdempotentLog).
type producer struct {
	mu     sync.Mutex
	loaded bool
	st     producerState
	// Log mode: exists says the record is in the catalog; scanned says
	// this process appended for the producer since it loaded the
	// record, so the Log holds nothing of it past the record's end that
	// the record does not know (no scan needed before appending).
	exists  bool
	scanned bool
}

// producerState is the stored record. Seq/First/N are the latest append
// (the record's only fields before the window existed, so old records
// load as a window of one); Older holds up to ProducerWindow-1 earlier
// ones, oldest first.
type producerState struct {
	Seq   uint64        `json:"seq"`
	First uint64        `json:"first"` // logic offset of the first record
	N     int           `json:"n"`
	Older []producerRun `json:"older,omitempty"`
	// Offs are the latest append's logic offsets when they are not
	// First..First+N-1 (Log mode: a batch resumed after a failover may
	// have other records between its parts).
	Offs []uint64 `json:"offs,omitempty"`
	// Low (Log mode) is a logic offset at or below which no append of
	// the producer lies: written before its first append, so a retry
	// after a crash knows where to look for it by ID.
	Low uint64 `json:"low,omitempty"`
}

// producerRun is one remembered append: its seq, first logic offset and
// record count.
type producerRun struct {
	Seq   uint64   `json:"s"`
	First uint64   `json:"f"`
	N     int      `json:"n"`
	Offs  []uint64 `json:"o,omitempty"` // see producerState.Offs
}

// find returns the remembered append with seq, if any.
func (st *producerState) find(seq uint64) (producerRun, bool) {
	if st.N > 0 && st.Seq == seq {
		return producerRun{st.Seq, st.First, st.N, st.Offs}, true
	}
	for _, r := range st.Older {
		if r.Seq == seq {
			return r, true
		}
	}
	return producerRun{}, false
}

// oldest returns the oldest remembered seq.
func (st *producerState) oldest() uint64 {
	if len(st.Older) > 0 {
		return st.Older[0].Seq
	}
	return st.Seq
}

// end returns the logic offset after the latest append (Low if none):
// a low-water mark of the producer's next append.
func (st *producerState) end() uint64 {
	switch {
	case len(st.Offs) > 0:
		return st.Offs[len(st.Offs)-1] + 1
	case st.N > 0:
		return st.First + uint64(st.N)
	}
	return st.Low
}

// push returns the state after a new latest append, keeping at most
// ProducerWindow appends.
func (st producerState) push(seq, first uint64, n int) producerState {
	return st.pushOffs(seq, first, n, nil)
}

// pushOffs is push with the append's offsets when they are not
// contiguous (nil when they are).
func (st producerState) pushOffs(seq, first uint64, n int, offs []uint64) producerState {
	next := producerState{Seq: seq, First: first, N: n, Offs: offs, Low: st.Low}
	if st.N > 0 {
		older := append(append([]producerRun(nil), st.Older...), producerRun{st.Seq, st.First, st.N, st.Offs})
		if len(older) > ProducerWindow-1 {
			older = older[len(older)-(ProducerWindow-1):]
		}
		next.Older = older
	}
	return next
}

func producerKey(topic string, id int, pid string) []byte {
	k := []byte(prefixProducer + topic + "\x00")
	k = binary.BigEndian.AppendUint32(k, uint32(id))
	return append(k, pid...)
}

func (m *Mapping) appendIdempotent(ctx context.Context, vchannel, topic string, id int, recs []wal.Record, o AppendOptions) ([]wal.Position, bool, error) {
	if len(o.ProducerID) > MaxProducerID {
		return nil, false, fmt.Errorf("%w: producer id is %d bytes, max %d", ErrInvalid, len(o.ProducerID), MaxProducerID)
	}
	key := producerKey(topic, id, o.ProducerID)
	m.prodMu.Lock()
	p := m.prods[string(key)]
	if p == nil {
		p = &producer{}
		m.prods[string(key)] = p
	}
	m.prodMu.Unlock()
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.loaded {
		p.st, p.exists, p.scanned = producerState{}, false, false
		err := m.store.View(ctx, func(r catalog.Reader) error {
			v, _, err := r.Get(key)
			if errors.Is(err, catalog.ErrNotFound) {
				return nil
			}
			if err != nil {
				return err
			}
			if err := json.Unmarshal(v, &p.st); err != nil {
				return &catalog.DecodeError{Key: key, Err: err}
			}
			p.exists = true
			return nil
		})
		if err != nil {
			return nil, false, err
		}
		p.loaded = true
	}
	if run, ok := p.st.find(o.Seq); ok {
		pos := make([]wal.Position, run.N)
		for i := range pos {
			pos[i] = wal.Position{VChannel: vchannel, Offset: run.First + uint64(i)}
		}
		if len(run.Offs) == run.N && run.N > 0 {
			for i, off := range run.Offs {
				pos[i].Offset = off
				if msgs, err := m.Read(ctx, vchannel, off, 1); err == nil && len(msgs) == 1 && msgs[0].Offset == off {
					pos[i] = msgs[0].Position
				}
			}
			return pos, true, nil
		}
		if msgs, err := m.Read(ctx, vchannel, run.First, run.N); err == nil {
			for i, msg := range msgs {
				pos[i] = msg.Position
			}
		}
		return pos, true, nil
	}
	if p.st.N > 0 && o.Seq < p.st.Seq {
		if o.Seq < p.st.oldest() {
			return nil, false, fmt.Errorf("%w: producer %q on %s sent seq %d, older than the last %d appends remembered (seqs %d..%d): too old to tell a retry from a new append",
				ErrSequence, o.ProducerID, vchannel, o.Seq, ProducerWindow, p.st.oldest(), p.st.Seq)
		}
		return nil, false, fmt.Errorf("%w: producer %q on %s sent seq %d after %d, and %d was never appended (seqs must increase)",
			ErrSequence, o.ProducerID, vchannel, o.Seq, p.st.Seq, o.Seq)
	}
	if m.log != nil {
		return m.appendIdempotentLog(ctx, vchannel, topic, id, recs, o, p, key)
	}
	var next producerState
	pos, err := m.appendLeader(ctx, vchannel, topic, id, recs, func(first uint64, ents []wal.Entry) []catalog.Op {
		next = p.st.push(o.Seq, first, len(ents))
		return []catalog.Op{{Key: key, Value: mustJSON(next)}}
	})
	if err != nil {
		p.loaded = false // the state record may or may not be the old one
		return nil, false, err
	}
	p.st = next
	return pos, false, nil
}

// appendIdempotentLog is a producer append in Log mode (p.mu held, p
// loaded, seq checked against the window). The Log cannot commit the
// producer window with the entries, so:
//
//  1. A producer the catalog does not know yet gets a record first: Low =
//     the logic queue's max (no append of the producer lies before Low).
//  2. The records carry IDs derived from (logic queue, producer, seq,
//     index). Unless this process already appended for the producer since
//     loading its record (p.scanned), the append is wal.AppendOnce-like
//     across the logic queue's segments (findLogic) from the record's end
//     (or Low): records an earlier attempt stored — in this process before
//     an error, or in another before a crash or failover — are found by ID
//     and keep their original positions; only the rest is appended.
//  3. The window is committed, checking the logic queue's record (as a
//     group commit does: a topic delete in between fails it, and the
//     delete range-checks the producer records).
//
// Between 2 and 3 a crash leaves records the window does not hold; the
// retry of that seq (the only one in flight: a producer's appends to a
// logic queue are serialized) finds them. Limits: the scan reads the
// logic queue from the window's end, so its cost grows with what other
// writers appended since the producer's last append; records retention
// trimmed before the retry cannot be found (appended again); and a retry
// of a seq that is older than a later committed one is answered from the
// window only.
func (m *Mapping) appendIdempotentLog(ctx context.Context, vchannel, topic string, id int, recs []wal.Record, o AppendOptions, p *producer, key []byte) ([]wal.Position, bool, error) {
	fail := func(err error) ([]wal.Position, bool, error) {
		p.loaded = false // the record may or may not be the old one
		return nil, false, err
	}
	if !p.exists {
		_, max, err := m.Bounds(ctx, vchannel)
		if err != nil {
			return fail(err)
		}
		st := producerState{Low: max}
		if err := m.commitProducer(ctx, topic, id, key, st, true); err != nil {
			return fail(err)
		}
		p.st, p.exists, p.scanned = st, true, true
	}
	low := p.st.end()
	pos, found, err := m.appendLog(ctx, vchannel, topic, id, producerIDs(topic, id, o.ProducerID, o.Seq, recs), &low, !p.scanned)
	if err != nil {
		return fail(err)
	}
	var offs []uint64
	for i := 1; i < len(pos); i++ {
		if pos[i].Offset != pos[0].Offset+uint64(i) {
			offs = make([]uint64, len(pos))
			for j := range pos {
				offs[j] = pos[j].Offset
			}
			break
		}
	}
	next := p.st.pushOffs(o.Seq, pos[0].Offset, len(pos), offs)
	failpoint.Hit("mapping.producer-appended")
	if err := m.commitProducer(ctx, topic, id, key, next, false); err != nil {
		return fail(err)
	}
	p.st, p.scanned = next, true
	m.met.appends.Add(ctx, int64(len(pos)-found))
	return pos, found == len(recs), nil
}

// commitProducer writes a producer record (Log mode), checking the logic
// queue's record as read just before (a remap committing meanwhile is
// retried; a deleted topic is wal.ErrNoChannel) and, for a new record,
// that none exists.
func (m *Mapping) commitProducer(ctx context.Context, topic string, id int, key []byte, st producerState, create bool) error {
	for attempt := 0; ; attempt++ {
		var qver catalog.Version
		err := m.store.View(ctx, func(r catalog.Reader) error {
			var err error
			_, qver, err = r.Get(queueKey(topic, id))
			if errors.Is(err, catalog.ErrNotFound) {
				return fmt.Errorf("%w: %q", wal.ErrNoChannel, VChannel(topic, id))
			}
			return err
		})
		if err != nil {
			return err
		}
		b := &catalog.Batch{Checks: []catalog.Check{{Key: queueKey(topic, id), Version: qver}},
			Ops: []catalog.Op{{Key: key, Value: mustJSON(st)}}}
		if create {
			b.Checks = append(b.Checks, catalog.Check{Key: key, Version: 0})
		}
		_, err = m.store.Commit(ctx, b)
		if errors.Is(err, catalog.ErrConflict) && attempt < 20 {
			m.met.conflict.Add(ctx, 1)
			continue
		}
		if err != nil {
			return fmt.Errorf("mapping: producer state of %s: %w", VChannel(topic, id), err)
		}
		return nil
	}
}

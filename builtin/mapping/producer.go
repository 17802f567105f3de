package mapping

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"sync"

	"github.com/hostd-dev/hostd/runtime/catalog"
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
// They are written in the same catalog commit as the entries
// (wal.AppendWith), so a crash cannot separate them.
type producer struct {
	mu     sync.Mutex
	loaded bool
	st     producerState
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
}

// producerRun is one remembered append: its seq, first logic offset and
// record count.
type producerRun struct {
	Seq   uint64 `json:"s"`
	First uint64 `json:"f"`
	N     int    `json:"n"`
}

// find returns the remembered append with seq, if any.
func (st *producerState) find(seq uint64) (producerRun, bool) {
	if st.N > 0 && st.Seq == seq {
		return producerRun{st.Seq, st.First, st.N}, true
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

// push returns the state after a new latest append, keeping at most
// ProducerWindow appends.
func (st producerState) push(seq, first uint64, n int) producerState {
	next := producerState{Seq: seq, First: first, N: n}
	if st.N > 0 {
		older := append(append([]producerRun(nil), st.Older...), producerRun{st.Seq, st.First, st.N})
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

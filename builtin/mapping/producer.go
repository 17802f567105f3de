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

// producer is one (logic queue, producer id)'s last accepted append. It is
// written in the same catalog commit as the entries (wal.AppendWith), so a
// crash cannot separate them.
type producer struct {
	mu     sync.Mutex
	loaded bool
	st     producerState
}

type producerState struct {
	Seq   uint64 `json:"seq"`
	First uint64 `json:"first"` // logic offset of the first record
	N     int    `json:"n"`
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
	if p.st.N > 0 && o.Seq == p.st.Seq {
		pos := make([]wal.Position, p.st.N)
		for i := range pos {
			pos[i] = wal.Position{VChannel: vchannel, Offset: p.st.First + uint64(i)}
		}
		if msgs, err := m.Read(ctx, vchannel, p.st.First, p.st.N); err == nil {
			for i, msg := range msgs {
				pos[i] = msg.Position
			}
		}
		return pos, true, nil
	}
	if p.st.N > 0 && o.Seq < p.st.Seq {
		return nil, false, fmt.Errorf("%w: producer %q on %s sent seq %d after %d", ErrSequence, o.ProducerID, vchannel, o.Seq, p.st.Seq)
	}
	var next producerState
	pos, err := m.appendLeader(ctx, vchannel, topic, id, recs, func(first uint64, ents []wal.Entry) []catalog.Op {
		next = producerState{Seq: o.Seq, First: first, N: len(ents)}
		return []catalog.Op{{Key: key, Value: mustJSON(next)}}
	})
	if err != nil {
		p.loaded = false // the state record may or may not be the old one
		return nil, false, err
	}
	p.st = next
	return pos, false, nil
}

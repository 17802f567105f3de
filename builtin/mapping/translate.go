package mapping

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"

	"go.opentelemetry.io/otel/attribute"

	"github.com/hostd-dev/hostd/runtime/catalog"
	"github.com/hostd-dev/hostd/runtime/wal"
)

// Translation places one message both ways: its logic queue and logic
// offset, and the segment, broker, physical queue and physical offset
// that store it. TranslateLogic and TranslatePhysical return it.
type Translation struct {
	Topic       string `json:"topic"`
	Queue       int    `json:"queue"`
	VChannel    string `json:"vchannel"`
	LogicOffset uint64 `json:"logic_offset"`

	Broker         string `json:"broker"`
	QueueID        uint64 `json:"queue_id"`
	PhysicalQueue  string `json:"physical_queue"`
	PhysicalOffset uint64 `json:"physical_offset"`

	// SegmentIndex is the segment's index in the logic queue's current
	// segment list (0 = oldest still mapped); Segment is that segment
	// with its physical queue's live bounds.
	SegmentIndex int         `json:"segment_index"`
	Segment      SegmentInfo `json:"segment"`

	// Retained: the message is still stored. False when retention has
	// trimmed it but its segment is still mapped (a later pass drops the
	// segment, and then the offset no longer translates at all).
	Retained bool `json:"retained"`
	// Min and Max are the logic queue's retained range [Min, Max).
	Min uint64 `json:"min"`
	Max uint64 `json:"max"`
}

// PhysicalRangeError is a physical offset outside the range its physical
// queue's segment maps: [Start, End). errors.Is(err, ErrOutOfRange) holds.
type PhysicalRangeError struct {
	PhysicalQueue string
	VChannel      string // the logic queue that owns the physical queue
	Offset        uint64
	Start, End    uint64
}

func (e *PhysicalRangeError) Error() string {
	return fmt.Sprintf("mapping: physical offset %d of %s is outside its segment of %s: mapped [%d, %d)",
		e.Offset, e.PhysicalQueue, e.VChannel, e.Start, e.End)
}

// Is reports whether target is ErrOutOfRange.
func (e *PhysicalRangeError) Is(target error) bool { return target == ErrOutOfRange }

// TranslateLogic returns where logic offset off of vchannel ("topic/N") is
// stored. It reads one catalog snapshot (never the cache), so the answer
// is consistent with concurrent remaps and retention. Offsets from the
// first mapped segment's start up to (not including) the queue's max
// translate; an offset retention has trimmed but whose segment is still
// mapped translates with Retained false.
//
// Errors: ErrInvalid (malformed vchannel), wal.ErrNoChannel (no such topic
// or logic queue), *RangeError (offset not mapped: below the first mapped
// segment, or at/after max).
func (m *Mapping) TranslateLogic(ctx context.Context, vchannel string, off uint64) (tr *Translation, err error) {
	ctx, end := m.span(ctx, "translate.logic", attribute.String("hostd.vchannel", vchannel), attribute.Int64("hostd.logic_offset", int64(off)))
	defer end(&err)
	t, id, err := ParseVChannel(vchannel)
	if err != nil {
		return nil, err
	}
	err = m.store.View(ctx, func(r catalog.Reader) error {
		qv, err := m.view(ctx, r, t, id)
		if err != nil {
			return err
		}
		segs := qv.q.Segments
		if off >= qv.max || off < segs[0].LogicOffset {
			return &RangeError{VChannel: vchannel, Offset: off, Min: qv.min, Max: qv.max}
		}
		i := sort.Search(len(segs), func(i int) bool { return segs[i].LogicOffset > off }) - 1
		tr = translation(t, id, qv, i, segs[i].StartOffset+off-segs[i].LogicOffset)
		return nil
	})
	return tr, err
}

// TranslatePhysical returns the logic queue and logic offset of physical
// offset off of broker's physical queue queueID. Physical queues are never
// reused, so at most one segment of one topic maps it. Like
// TranslateLogic it reads one catalog snapshot.
//
// Errors: ErrInvalid (malformed broker name), ErrNotFound (no topic maps
// that physical queue: never created, an orphan, or its segment was
// dropped by retention or a topic delete), *PhysicalRangeError (off is
// outside the segment's mapped range).
func (m *Mapping) TranslatePhysical(ctx context.Context, broker string, queueID, off uint64) (tr *Translation, err error) {
	pq := PhysicalQueue(broker, queueID)
	ctx, end := m.span(ctx, "translate.physical", attribute.String("hostd.physical_queue", pq), attribute.Int64("hostd.physical_offset", int64(off)))
	defer end(&err)
	if err := ValidateBrokerName(broker); err != nil {
		return nil, err
	}
	err = m.store.View(ctx, func(r catalog.Reader) error {
		// The cache names the owner in memory; the snapshot confirms it
		// (physical queues are never reused, so a snapshot's logic queue
		// that holds the segment is its only owner). A cache that is
		// behind falls back to scanning the snapshot.
		var qv *qview
		t, id, ok := m.cachedOwner(broker, queueID)
		if ok {
			v, err := m.view(ctx, r, t, id)
			if err != nil && !errors.Is(err, wal.ErrNoChannel) {
				return err
			}
			if err == nil && holds(v.q, broker, queueID) {
				qv = v
			}
		}
		if qv == nil {
			var err error
			if t, id, ok, err = findOwner(r, broker, queueID); err != nil {
				return err
			}
			if !ok {
				return fmt.Errorf("%w: physical queue %q is not mapped by any topic", ErrNotFound, pq)
			}
			if qv, err = m.view(ctx, r, t, id); err != nil {
				return err
			}
		}
		for i, s := range qv.q.Segments {
			if s.Broker != broker || s.QueueID != queueID {
				continue
			}
			segEndPhys := s.StartOffset + segEnd(s, qv.bounds[i]) - s.LogicOffset
			if off < s.StartOffset || off >= segEndPhys {
				return &PhysicalRangeError{PhysicalQueue: pq, VChannel: VChannel(t, id), Offset: off, Start: s.StartOffset, End: segEndPhys}
			}
			tr = translation(t, id, qv, i, off)
			return nil
		}
		// findOwner and view read the same snapshot, so this cannot happen.
		return fmt.Errorf("%w: physical queue %q vanished from %s", ErrNotFound, pq, VChannel(t, id))
	})
	return tr, err
}

// cachedOwner looks (broker, queueID) up in the topic cache.
func (m *Mapping) cachedOwner(broker string, queueID uint64) (string, int, bool) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	for name, c := range m.topics {
		for _, q := range c.queues {
			if holds(q, broker, queueID) {
				return name, q.ID, true
			}
		}
	}
	return "", 0, false
}

func holds(q *LogicQueue, broker string, queueID uint64) bool {
	for _, s := range q.Segments {
		if s.QueueID == queueID && s.Broker == broker {
			return true
		}
	}
	return false
}

// findOwner scans the logic queue records for the segment on (broker,
// queueID). Records are only decoded when their bytes mention the queue
// id, so a lookup costs one scan of the mapping's queue records.
func findOwner(r catalog.Reader, broker string, queueID uint64) (topic string, id int, ok bool, err error) {
	needle := []byte(`"queue_id":` + strconv.FormatUint(queueID, 10))
	err = r.Scan([]byte(prefixQueue), []byte(catalog.NSMapping+"q0"), func(kv catalog.KV) error {
		if !mentions(kv.Value, needle) {
			return nil
		}
		q, err := decodeQueue(kv.Key, kv.Value)
		if err != nil {
			return err
		}
		for _, s := range q.Segments {
			if s.Broker == broker && s.QueueID == queueID {
				topic, id, ok = q.Topic, q.ID, true
				return catalog.ErrStop
			}
		}
		return nil
	})
	if errors.Is(err, catalog.ErrStop) {
		err = nil
	}
	return topic, id, ok, err
}

// mentions reports whether b contains needle not followed by a digit
// (so "queue_id":1 does not match "queue_id":12).
func mentions(b, needle []byte) bool {
	for {
		i := bytes.Index(b, needle)
		if i < 0 {
			return false
		}
		b = b[i+len(needle):]
		if len(b) == 0 || b[0] < '0' || b[0] > '9' {
			return true
		}
	}
}

func translation(t string, id int, qv *qview, i int, phys uint64) *Translation {
	s := qv.q.Segments[i]
	b := qv.bounds[i]
	logic := s.LogicOffset + phys - s.StartOffset
	return &Translation{
		Topic: t, Queue: id, VChannel: VChannel(t, id), LogicOffset: logic,
		Broker: s.Broker, QueueID: s.QueueID, PhysicalQueue: s.PhysicalQueue(), PhysicalOffset: phys,
		SegmentIndex: i,
		Segment: SegmentInfo{Segment: s, PhysicalQueue: s.PhysicalQueue(), Open: !s.Closed(),
			LogicEnd: segEnd(s, b), PhysMin: b.Min, PhysMax: b.Max,
			FirstTime: tickTime(s.FirstTick), LastTime: tickTime(s.LastTick)},
		Retained: logic >= qv.min && logic < qv.max && phys >= b.Min && phys < b.Max,
		Min:      qv.min, Max: qv.max,
	}
}

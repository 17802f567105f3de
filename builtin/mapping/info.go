package mapping

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"go.opentelemetry.io/otel/attribute"

	"github.com/hostd-dev/hostd/runtime/catalog"
)

// SegmentInfo is a segment with its physical queue's live bounds.
type SegmentInfo struct {
	Segment
	PhysicalQueue string     `json:"physical_queue"`
	Open          bool       `json:"open"`
	LogicEnd      uint64     `json:"logic_end"` // exclusive
	PhysMin       uint64     `json:"phys_min"`
	PhysMax       uint64     `json:"phys_max"`
	FirstTime     *time.Time `json:"first_time,omitempty"`
	LastTime      *time.Time `json:"last_time,omitempty"`
}

// QueueInfo is one logic queue as shown by Describe.
type QueueInfo struct {
	ID       int           `json:"id"`
	VChannel string        `json:"vchannel"`
	Broker   string        `json:"broker"` // the leader's
	Min      uint64        `json:"min"`
	Max      uint64        `json:"max"`
	Segments []SegmentInfo `json:"segments"`
}

// TopicInfo is Describe's result.
type TopicInfo struct {
	Topic  Topic         `json:"topic"`
	Queues []QueueInfo   `json:"queues"`
	Groups []GroupOffset `json:"groups,omitempty"` // every group with a committed offset on the topic
}

func tickTime(t uint64) *time.Time {
	if t == 0 {
		return nil
	}
	v := time.Unix(0, int64(t)).UTC()
	return &v
}

// Describe returns topic with every logic queue's segments, bounds and
// the consumer groups' lag.
func (m *Mapping) Describe(ctx context.Context, topic string) (ti *TopicInfo, err error) {
	ctx, end := m.span(ctx, "describe", attribute.String("hostd.topic", topic))
	defer end(&err)
	err = m.store.View(ctx, func(r catalog.Reader) error {
		c, err := loadTopic(r, topic, nil)
		if err != nil {
			return err
		}
		ti = &TopicInfo{Topic: *c.t}
		for i := range c.queues {
			qv, err := m.view(ctx, r, topic, i)
			if err != nil {
				return err
			}
			qi := QueueInfo{ID: i, VChannel: VChannel(topic, i), Broker: qv.q.Leader().Broker, Min: qv.min, Max: qv.max}
			for j, s := range qv.q.Segments {
				b := qv.bounds[j]
				si := SegmentInfo{Segment: s, PhysicalQueue: s.PhysicalQueue(), Open: !s.Closed(),
					LogicEnd: segEnd(s, b), PhysMin: b.Min, PhysMax: b.Max,
					FirstTime: tickTime(s.FirstTick), LastTime: tickTime(s.LastTick)}
				if !s.Closed() {
					si.LastTime = tickTime(b.LastTick)
					if b.Min < b.Max {
						if e, err := m.readFirst(ctx, r, s.PhysicalQueue(), b.Min); err == nil {
							si.FirstTime = tickTime(e)
						}
					}
				}
				qi.Segments = append(qi.Segments, si)
			}
			ti.Queues = append(ti.Queues, qi)
		}
		// Consumer groups with offsets on this topic: one range.
		gs, ge := groupRange(topic)
		return r.Scan(gs, ge, func(kv catalog.KV) error {
			g, id, ok := parseGroupKey(topic, kv.Key)
			if !ok || id >= len(ti.Queues) {
				return nil
			}
			var rec groupRecord
			if err := json.Unmarshal(kv.Value, &rec); err != nil {
				return &catalog.DecodeError{Key: kv.Key, Err: err}
			}
			q := ti.Queues[id]
			go_ := GroupOffset{Group: g, VChannel: q.VChannel, Committed: true, Offset: rec.Offset, At: rec.At, Min: q.Min, Max: q.Max}
			go_.Expired = go_.Offset < go_.Min
			if go_.Offset < go_.Max {
				go_.Lag = go_.Max - go_.Offset
			}
			if go_.Expired {
				go_.Lag = go_.Max - go_.Min
			}
			ti.Groups = append(ti.Groups, go_)
			return nil
		})
	})
	return ti, err
}

func (m *Mapping) readFirst(ctx context.Context, r catalog.Reader, pq string, off uint64) (uint64, error) {
	ents, err := m.readPhys(ctx, r, pq, off, 1)
	if err != nil || len(ents) == 0 {
		return 0, errors.New("no entry")
	}
	return ents[0].Tick, nil
}

// List returns up to limit topics with names after `after`, in name order,
// and whether more exist.
func (m *Mapping) List(ctx context.Context, after string, limit int) (out []Topic, more bool, err error) {
	ctx, end := m.span(ctx, "list")
	defer end(&err)
	if limit <= 0 {
		return nil, false, fmt.Errorf("%w: limit must be > 0", ErrInvalid)
	}
	start := []byte(prefixTopic)
	if after != "" {
		start = append(topicKey(after), 0)
	}
	err = m.store.View(ctx, func(r catalog.Reader) error {
		return r.Scan(start, []byte(catalog.NSMapping+"t0"), func(kv catalog.KV) error {
			if len(out) == limit {
				more = true
				return catalog.ErrStop
			}
			t, err := decodeTopic(kv.Key, kv.Value)
			if err != nil {
				return err
			}
			out = append(out, *t)
			return nil
		})
	})
	return out, more, err
}

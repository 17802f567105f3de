package mapping

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"go.opentelemetry.io/otel/attribute"

	"github.com/hostd-dev/hostd/runtime/catalog"
)

// MaxGroupName is the longest consumer group name, in bytes.
const MaxGroupName = 128

func groupKey(group, topic string, id int) []byte {
	k := []byte(prefixGroup + group + "\x00" + topic + "\x00")
	return binary.BigEndian.AppendUint32(k, uint32(id))
}

type groupRecord struct {
	Offset uint64    `json:"offset"`
	At     time.Time `json:"at"`
}

// GroupOffset is a consumer group's position in one logic queue, with the
// queue's current bounds and the lag.
type GroupOffset struct {
	Group     string    `json:"group"`
	VChannel  string    `json:"vchannel"`
	Committed bool      `json:"committed"`
	Offset    uint64    `json:"offset"` // next offset to consume
	At        time.Time `json:"committed_at,omitzero"`
	Min       uint64    `json:"min"`
	Max       uint64    `json:"max"`
	Lag       uint64    `json:"lag"` // max - offset (max - min if never committed)
	// Expired: retention has passed the committed offset; the consumer
	// resumes at Min or decides otherwise.
	Expired bool `json:"expired"`
}

func validateGroup(g string) error {
	if g == "" || len(g) > MaxGroupName {
		return fmt.Errorf("%w: group name must be 1..%d bytes", ErrInvalid, MaxGroupName)
	}
	for i := 0; i < len(g); i++ {
		if g[i] < 0x20 || g[i] == 0x7f {
			return fmt.Errorf("%w: group name %q contains a control character", ErrInvalid, g)
		}
	}
	return nil
}

// CommitOffset stores group's next offset for vchannel. An offset beyond
// the queue's max is an *RangeError; one below min is accepted (and shows
// as Expired).
func (m *Mapping) CommitOffset(ctx context.Context, group, vchannel string, offset uint64) (err error) {
	ctx, end := m.span(ctx, "group.commit", attribute.String("hostd.group", group), attribute.String("hostd.vchannel", vchannel))
	defer end(&err)
	if err := validateGroup(group); err != nil {
		return err
	}
	t, id, err := m.parse(vchannel)
	if err != nil {
		return err
	}
	_, max, err := m.Bounds(ctx, vchannel)
	if err != nil {
		return err
	}
	if offset > max {
		min, _, _ := m.Bounds(ctx, vchannel)
		return &RangeError{VChannel: vchannel, Offset: offset, Min: min, Max: max}
	}
	_, err = m.store.Commit(ctx, &catalog.Batch{Ops: []catalog.Op{{
		Key: groupKey(group, t, id), Value: mustJSON(groupRecord{Offset: offset, At: m.cfg.Clock.Now().UTC()}),
	}}})
	return err
}

// GroupOffset returns group's position in vchannel.
func (m *Mapping) GroupOffset(ctx context.Context, group, vchannel string) (GroupOffset, error) {
	if err := validateGroup(group); err != nil {
		return GroupOffset{}, err
	}
	t, id, err := m.parse(vchannel)
	if err != nil {
		return GroupOffset{}, err
	}
	var g GroupOffset
	err = m.store.View(ctx, func(r catalog.Reader) error {
		var err error
		g, err = groupOffset(r, group, t, id)
		return err
	})
	return g, err
}

func groupOffset(r catalog.Reader, group, t string, id int) (GroupOffset, error) {
	g := GroupOffset{Group: group, VChannel: VChannel(t, id)}
	qv, err := view(r, t, id)
	if err != nil {
		return g, err
	}
	g.Min, g.Max = qv.min, qv.max
	v, _, err := r.Get(groupKey(group, t, id))
	switch {
	case errors.Is(err, catalog.ErrNotFound):
		g.Lag = g.Max - g.Min
		return g, nil
	case err != nil:
		return g, err
	}
	var rec groupRecord
	if err := json.Unmarshal(v, &rec); err != nil {
		return g, &catalog.DecodeError{Key: groupKey(group, t, id), Err: err}
	}
	g.Committed, g.Offset, g.At = true, rec.Offset, rec.At
	g.Expired = g.Offset < g.Min
	if g.Offset < g.Max {
		g.Lag = g.Max - g.Offset
	}
	if g.Expired {
		g.Lag = g.Max - g.Min
	}
	return g, nil
}

// Lag returns group's position in every logic queue of topic.
func (m *Mapping) Lag(ctx context.Context, group, topic string) (out []GroupOffset, err error) {
	ctx, end := m.span(ctx, "group.lag", attribute.String("hostd.group", group), attribute.String("hostd.topic", topic))
	defer end(&err)
	if err := validateGroup(group); err != nil {
		return nil, err
	}
	err = m.store.View(ctx, func(r catalog.Reader) error {
		v, _, err := r.Get(topicKey(topic))
		if errors.Is(err, catalog.ErrNotFound) {
			return fmt.Errorf("%w: topic %q", ErrNotFound, topic)
		}
		if err != nil {
			return err
		}
		tp, err := decodeTopic(topicKey(topic), v)
		if err != nil {
			return err
		}
		for i := 0; i < tp.Queues; i++ {
			g, err := groupOffset(r, group, topic, i)
			if err != nil {
				return err
			}
			out = append(out, g)
		}
		return nil
	})
	return out, err
}

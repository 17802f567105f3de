package mapping

import (
	"bytes"
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

// groupKey is the record of group's offset in logic queue id of topic:
// mp/o/<topic>\x00<group>\x00<id BE4>. Keys lead with the topic so that
// a topic's offsets are one range: Describe scans it, and a topic delete
// deletes it (with a RangeCheck) in the same commit as the topic. Topic
// names hold no NUL and group names no control characters, so the range
// of one topic never includes another's.
func groupKey(group, topic string, id int) []byte {
	k := []byte(prefixOffset + topic + "\x00" + group + "\x00")
	return binary.BigEndian.AppendUint32(k, uint32(id))
}

// groupRange is the key range of every group offset on topic.
func groupRange(topic string) (start, end []byte) {
	return []byte(prefixOffset + topic + "\x00"), []byte(prefixOffset + topic + "\x01")
}

// parseGroupKey splits a key of groupRange(topic) into (group, queue id).
func parseGroupKey(topic string, key []byte) (string, int, bool) {
	start, _ := groupRange(topic)
	rest, ok := bytes.CutPrefix(key, start)
	if !ok || len(rest) < 5 || rest[len(rest)-5] != 0 {
		return "", 0, false
	}
	return string(rest[:len(rest)-5]), int(binary.BigEndian.Uint32(rest[len(rest)-4:])), true
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
	// The commit checks the logic queue's record as read with the bounds:
	// a topic deleted (or deleted and created again) meanwhile fails the
	// check, so an offset is never written for a topic that is gone, and
	// the delete's RangeCheck covers every offset written before it.
	for attempt := 0; ; attempt++ {
		// A remap or delete of the queue being committed holds it.
		if err := m.waitHold(ctx, vchannel, t, id); err != nil {
			return err
		}
		var qver catalog.Version
		err := m.store.View(ctx, func(r catalog.Reader) error {
			qv, err := m.view(ctx, r, t, id)
			if err != nil {
				return err
			}
			if offset > qv.max {
				return &RangeError{VChannel: vchannel, Offset: offset, Min: qv.min, Max: qv.max}
			}
			_, qver, err = r.Get(queueKey(t, id))
			return err
		})
		if err != nil {
			return err
		}
		_, err = m.store.Commit(ctx, &catalog.Batch{
			Checks: []catalog.Check{{Key: queueKey(t, id), Version: qver}},
			Ops: []catalog.Op{{
				Key: groupKey(group, t, id), Value: mustJSON(groupRecord{Offset: offset, At: m.cfg.Clock.Now().UTC()}),
			}}})
		if errors.Is(err, catalog.ErrConflict) && attempt < 20 {
			m.met.conflict.Add(ctx, 1) // a remap or delete of the queue committed meanwhile
			continue
		}
		return err
	}
}

// GroupOffset returns group's position in vchannel.
func (m *Mapping) GroupOffset(ctx context.Context, group, vchannel string) (g GroupOffset, err error) {
	ctx, end := m.span(ctx, "group.get", attribute.String("hostd.group", group), attribute.String("hostd.vchannel", vchannel))
	defer end(&err)
	if err := validateGroup(group); err != nil {
		return GroupOffset{}, err
	}
	t, id, err := m.parse(vchannel)
	if err != nil {
		return GroupOffset{}, err
	}
	err = m.store.View(ctx, func(r catalog.Reader) error {
		var err error
		g, err = m.groupOffset(ctx, r, group, t, id)
		return err
	})
	return g, err
}

func (m *Mapping) groupOffset(ctx context.Context, r catalog.Reader, group, t string, id int) (GroupOffset, error) {
	g := GroupOffset{Group: group, VChannel: VChannel(t, id)}
	qv, err := m.view(ctx, r, t, id)
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
			g, err := m.groupOffset(ctx, r, group, topic, i)
			if err != nil {
				return err
			}
			out = append(out, g)
		}
		return nil
	})
	return out, err
}

// deleteTopicOffsets adds to p the deletes of every group offset and
// producer state of topic found in r. The group range gets a RangeCheck: a
// group commit that lands between the snapshot and the delete's commit
// makes the delete re-run (CommitOffset checks the queue record, so a
// commit after the delete fails instead). In WAL mode producer states are
// written only with an append, and an append changes the leader's WAL
// meta record that the delete's seal checks, so they need no range check.
// In Log mode (producerCheck) a producer state is committed after its
// append, checking the queue record like a group commit: the producer
// range gets a RangeCheck as the group range does.
func deleteTopicOffsets(r catalog.Reader, topic string, p *Plan, producerCheck bool) error {
	gs, ge := groupRange(topic)
	rc := catalog.RangeCheck{Start: gs, End: ge}
	err := r.Scan(gs, ge, func(kv catalog.KV) error {
		rc.Seen = append(rc.Seen, catalog.KeyVersion{Key: kv.Key, Version: kv.Version})
		p.Ops = append(p.Ops, catalog.Op{Key: kv.Key, Delete: true})
		return nil
	})
	if err != nil {
		return err
	}
	p.RangeChecks = append(p.RangeChecks, rc)
	ps := []byte(prefixProducer + topic + "\x00")
	pe := []byte(prefixProducer + topic + "\x01")
	prc := catalog.RangeCheck{Start: ps, End: pe}
	err = r.Scan(ps, pe, func(kv catalog.KV) error {
		prc.Seen = append(prc.Seen, catalog.KeyVersion{Key: kv.Key, Version: kv.Version})
		p.Ops = append(p.Ops, catalog.Op{Key: kv.Key, Delete: true})
		return nil
	})
	if err == nil && producerCheck {
		p.RangeChecks = append(p.RangeChecks, prc)
	}
	return err
}

// MigrateGroupOffsets moves group offsets stored under the layout of
// hostd before topic deletes removed them (mp/g/<group>\x00<topic>\x00<q>)
// to the current one (mp/o/<topic>\x00<group>\x00<q>). Offsets of topics
// that no longer exist are deleted (they would leak into a topic created
// later with the same name); an offset already present under the new
// layout wins. It is idempotent and cheap when there is nothing to move;
// the host runs it after Open, before serving. It returns how many
// records were moved and how many dropped.
func (m *Mapping) MigrateGroupOffsets(ctx context.Context) (moved, dropped int, err error) {
	const chunk = 512
	for {
		var b catalog.Batch
		nMoved, nDropped := 0, 0
		err := m.store.View(ctx, func(r catalog.Reader) error {
			return r.Scan([]byte(prefixLegacyGroup), []byte(catalog.NSMapping+"g0"), func(kv catalog.KV) error {
				if len(b.Ops) >= chunk {
					return catalog.ErrStop
				}
				b.Checks = append(b.Checks, catalog.Check{Key: kv.Key, Version: kv.Version})
				b.Ops = append(b.Ops, catalog.Op{Key: kv.Key, Delete: true})
				rest := kv.Key[len(prefixLegacyGroup):]
				g, tq, ok1 := bytes.Cut(rest, []byte{0})
				t, qb, ok2 := bytes.Cut(tq, []byte{0})
				if !ok1 || !ok2 || len(qb) != 4 || validateGroup(string(g)) != nil {
					nDropped++
					return nil
				}
				id := int(binary.BigEndian.Uint32(qb))
				if _, _, err := r.Get(queueKey(string(t), id)); errors.Is(err, catalog.ErrNotFound) {
					nDropped++
					return nil
				} else if err != nil {
					return err
				}
				nk := groupKey(string(g), string(t), id)
				if _, ver, err := r.Get(nk); err == nil {
					b.Checks = append(b.Checks, catalog.Check{Key: nk, Version: ver})
					nDropped++
					return nil
				} else if !errors.Is(err, catalog.ErrNotFound) {
					return err
				}
				b.Checks = append(b.Checks, catalog.Check{Key: nk, Version: 0})
				b.Ops = append(b.Ops, catalog.Op{Key: nk, Value: kv.Value})
				nMoved++
				return nil
			})
		})
		if err != nil {
			return moved, dropped, fmt.Errorf("mapping: migrate group offsets: %w", err)
		}
		if len(b.Ops) == 0 {
			return moved, dropped, nil
		}
		if _, err := m.store.Commit(ctx, &b); err != nil {
			if errors.Is(err, catalog.ErrConflict) {
				continue
			}
			return moved, dropped, fmt.Errorf("mapping: migrate group offsets: %w", err)
		}
		moved += nMoved
		dropped += nDropped
	}
}

package mapping

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/hostd-dev/hostd/runtime/catalog"
	"github.com/hostd-dev/hostd/runtime/wal"
)

// RetentionReport says what one retention pass did.
type RetentionReport struct {
	Trimmed  uint64   // entries removed
	Dropped  int      // closed segments dropped from mappings
	Orphaned []string // unreferenced physical queues deleted
}

// ApplyRetention runs one retention pass over every topic (the control
// topic with Config.ControlRetention): on each logic queue, entries older
// than MaxAge and beyond MaxBytes (newest kept) are trimmed from every
// physical queue, the open leader included; closed segments whose data is
// all gone are dropped from the mapping (with an optimistic check on the
// queue record, so it never undoes a concurrent remap) and their physical
// queues deleted. It also deletes physical queues no topic references.
//
// Retention does not take the topic's resource key (mapping.md says it
// should; a builtin cannot reach the lock service, and passes run outside
// any broadcast). It is safe without it because (1) wal.Trim writes only
// the queue's min record and entry deletions, so it never conflicts with
// an append or with a remap's seal, and a remap reads the seal's end from
// the WAL meta record that Trim does not touch; (2) trims run oldest
// segment first, so the retained messages are always a suffix of the
// logic queue and readers never meet a hole; (3) a segment drop commits
// with an optimistic check on the queue record, so a remap or delete that
// committed since the pass read it wins and the drop waits for the next
// pass; (4) a queue deleted meanwhile is skipped. Offsets are never
// renumbered: trims move a queue's min, never an offset.
// TestHammerRetentionRemapAppendGroups checks this under -race.
func (m *Mapping) ApplyRetention(ctx context.Context) (rep RetentionReport, err error) {
	ctx, end := m.span(ctx, "retention")
	defer end(&err)
	now := m.cfg.Clock.Now()
	var topics []*Topic
	err = m.store.View(ctx, func(r catalog.Reader) error {
		return r.Scan([]byte(prefixTopic), []byte(catalog.NSMapping+"t0"), func(kv catalog.KV) error {
			t, err := decodeTopic(kv.Key, kv.Value)
			if err != nil {
				return err
			}
			topics = append(topics, t)
			return nil
		})
	})
	if err != nil {
		return rep, err
	}
	for _, t := range topics {
		ret := t.Retention
		if t.Name == ControlTopic {
			ret = m.cfg.ControlRetention
		}
		if ret.MaxAge <= 0 && ret.MaxBytes == 0 {
			continue
		}
		for id := 0; id < t.Queues; id++ {
			n, d, err := m.retainQueue(ctx, t.Name, id, ret, now)
			rep.Trimmed += n
			rep.Dropped += d
			if err != nil && !errors.Is(err, wal.ErrNoChannel) {
				return rep, fmt.Errorf("mapping: retention of %s: %w", VChannel(t.Name, id), err)
			}
		}
	}
	orph, err := m.sweepOrphans(ctx)
	rep.Orphaned = orph
	m.met.trimmed.Add(ctx, int64(rep.Trimmed))
	m.met.dropped.Add(ctx, int64(rep.Dropped))
	return rep, err
}

func (m *Mapping) retainQueue(ctx context.Context, topic string, id int, ret Retention, now time.Time) (uint64, int, error) {
	type cut struct {
		pq string
		to uint64
	}
	var cuts []cut
	var qv *qview
	var qver catalog.Version
	err := m.store.View(ctx, func(r catalog.Reader) error {
		var err error
		if qv, err = m.view(ctx, r, topic, id); err != nil {
			return err
		}
		if _, qver, err = r.Get(queueKey(topic, id)); err != nil {
			return err
		}
		budget := ret.MaxBytes
		for i := len(qv.q.Segments) - 1; i >= qv.first; i-- {
			s := qv.q.Segments[i]
			pq := s.PhysicalQueue()
			b := qv.bounds[i]
			to := b.Min
			if m.log != nil {
				hi := b.Max
				if s.Closed() {
					hi = *s.EndOffset
				}
				var cutTick uint64
				if ns := now.Add(-ret.MaxAge).UnixNano(); ret.MaxAge > 0 && ns > 0 {
					cutTick = uint64(ns)
				}
				t, kept, err := m.retainCutLog(ctx, pq, b.Min, max(hi, b.Min), ret.MaxAge > 0, cutTick, ret.MaxBytes > 0, budget)
				if err != nil {
					return err
				}
				if t > b.Min {
					cuts = append(cuts, cut{pq, t})
				}
				budget -= min(budget, kept)
				continue
			}
			if ret.MaxAge > 0 {
				cutTick := uint64(0)
				if ns := now.Add(-ret.MaxAge).UnixNano(); ns > 0 {
					cutTick = uint64(ns)
				}
				o, err := wal.OffsetAtTick(r, pq, cutTick)
				if err != nil {
					return err
				}
				to = max(to, o)
			}
			if ret.MaxBytes > 0 {
				o, err := wal.OffsetKeepingBytes(r, pq, budget)
				if err != nil {
					return err
				}
				to = max(to, o)
			}
			if to > b.Min {
				cuts = append(cuts, cut{pq, to})
			}
			if ret.MaxBytes > 0 {
				kept, err := wal.BytesFrom(r, pq, to)
				if err != nil {
					return err
				}
				if kept >= budget {
					budget = 0
				} else {
					budget -= kept
				}
			}
		}
		return nil
	})
	if err != nil {
		return 0, 0, err
	}
	// Trim oldest first: cuts were collected newest first, and trimming a
	// newer segment while an older one still holds data would leave a
	// hole in the logic queue that readers in between would hit (the
	// retained messages must always be a suffix of the queue). Found by
	// TestHammerRetentionRemapAppendGroups.
	var trimmed uint64
	for i := len(cuts) - 1; i >= 0; i-- {
		c := cuts[i]
		before, _ := m.phys().Min(ctx, c.pq)
		after, err := m.phys().Trim(ctx, c.pq, c.to)
		if errors.Is(err, wal.ErrNoQueue) {
			continue // the topic was deleted (or the segment dropped) meanwhile
		}
		if err != nil {
			return trimmed, 0, err
		}
		if after > before {
			trimmed += after - before
		}
	}
	// Drop the closed prefix whose data is gone.
	var drop []string
	err = m.store.View(ctx, func(r catalog.Reader) error {
		var err error
		if qv, err = m.view(ctx, r, topic, id); err != nil {
			return err
		}
		var ver catalog.Version
		if _, ver, err = r.Get(queueKey(topic, id)); err != nil {
			return err
		}
		qver = ver
		for i := 0; i < qv.first; i++ {
			drop = append(drop, qv.q.Segments[i].PhysicalQueue())
		}
		return nil
	})
	if err != nil || len(drop) == 0 {
		return trimmed, 0, err
	}
	nq := *qv.q
	nq.Segments = append([]Segment(nil), qv.q.Segments[len(drop):]...)
	if _, err := m.store.Commit(ctx, &catalog.Batch{
		Checks: []catalog.Check{{Key: queueKey(topic, id), Version: qver}},
		Ops:    []catalog.Op{{Key: queueKey(topic, id), Value: mustJSON(&nq)}},
	}); err != nil {
		if errors.Is(err, catalog.ErrConflict) {
			return trimmed, 0, nil // changed meanwhile: the next pass drops it
		}
		return trimmed, 0, err
	}
	if err := m.Refresh(ctx, topic); err != nil {
		return trimmed, len(drop), err
	}
	for _, pq := range drop {
		if err := m.phys().Delete(ctx, pq); err != nil && !errors.Is(err, wal.ErrNoQueue) {
			return trimmed, len(drop), err
		}
	}
	return trimmed, len(drop), nil
}

// sweepOrphans deletes physical queues of configured brokers that no topic
// references (left by a deleted topic after a crash, or a dropped segment
// whose delete failed). In WAL mode listing and references come from one
// snapshot, and mapping changes create their queues in the same commit as
// the references, so a queue being created is never taken for an orphan.
// In Log mode (sweepOrphansLog) queues are created before the plan that
// references them commits.
func (m *Mapping) sweepOrphans(ctx context.Context) ([]string, error) {
	if m.log != nil {
		return m.sweepOrphansLog(ctx)
	}
	var orphans []string
	err := m.store.View(ctx, func(r catalog.Reader) error {
		used, err := usedQueues(r)
		if err != nil {
			return err
		}
		for _, b := range m.brokerNames() {
			qs, err := wal.ListQueues(r, b+"/")
			if err != nil {
				return err
			}
			for _, q := range qs {
				if !used[q] {
					orphans = append(orphans, q)
				}
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	for _, q := range orphans {
		if err := m.w.Delete(ctx, q); err != nil && !errors.Is(err, wal.ErrNoQueue) {
			return orphans, err
		}
	}
	return orphans, nil
}

// sweepOrphansLog is sweepOrphans in Log mode. A plan creates its queues
// on the Log before it commits, so: the Log is listed first and the
// references read after (a queue listed and committed meanwhile is seen
// referenced), and queues this process created for plans not committed
// yet are left alone for orphanGrace (a plan that never commits leaves
// an orphan, deleted by the first sweep after the grace). Only the
// leader plans and sweeps, so in-process knowledge is enough: a plan of
// an older leader can no longer commit.
func (m *Mapping) sweepOrphansLog(ctx context.Context) ([]string, error) {
	var listed []string
	for _, b := range m.brokerNames() {
		qs, err := m.log.Queues(ctx, b+"/")
		if err != nil {
			return nil, err
		}
		listed = append(listed, qs...)
	}
	var used map[string]bool
	err := m.store.View(ctx, func(r catalog.Reader) (err error) {
		used, err = usedQueues(r)
		return err
	})
	if err != nil {
		return nil, err
	}
	now := m.cfg.Clock.Now()
	var orphans []string
	m.mu.Lock()
	for _, q := range listed {
		if used[q] {
			continue
		}
		if at, ok := m.pending[q]; ok {
			if now.Sub(at) < m.orphanGrace() {
				continue
			}
			delete(m.pending, q)
		}
		orphans = append(orphans, q)
	}
	for q, at := range m.pending {
		if now.Sub(at) >= m.orphanGrace() {
			delete(m.pending, q) // gone or committed without Committed
		}
	}
	m.mu.Unlock()
	for _, q := range orphans {
		if err := m.log.Delete(ctx, q); err != nil && !errors.Is(err, wal.ErrNoQueue) {
			return orphans, err
		}
	}
	return orphans, nil
}

// Run applies retention every RetentionInterval until ctx ends.
func (m *Mapping) Run(ctx context.Context) error {
	for {
		if _, err := m.ApplyRetention(ctx); err != nil && ctx.Err() == nil {
			m.logger.Warn("mapping: retention pass failed", "err", err)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-m.cfg.Clock.After(m.cfg.RetentionInterval):
		}
	}
}

// usedQueues returns the physical queues some logic queue's segment
// references, read from r.
func usedQueues(r catalog.Reader) (map[string]bool, error) {
	used := map[string]bool{}
	err := r.Scan([]byte(prefixQueue), []byte(catalog.NSMapping+"q0"), func(kv catalog.KV) error {
		q, err := decodeQueue(kv.Key, kv.Value)
		if err != nil {
			return err
		}
		for _, s := range q.Segments {
			used[s.PhysicalQueue()] = true
		}
		return nil
	})
	return used, err
}

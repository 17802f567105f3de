package mapping

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"

	"go.opentelemetry.io/otel/attribute"

	"github.com/hostd-dev/hostd/runtime/catalog"
	"github.com/hostd-dev/hostd/runtime/failpoint"
	"github.com/hostd-dev/hostd/runtime/wal"
	"github.com/hostd-dev/hostd/sdk/abi"
)

// Change kinds; the broadcast message types are "topic." + kind.
const (
	KindCreate = "create"
	KindGrow   = "grow"
	KindRemap  = "remap"
	KindDelete = "delete"
)

// MessageTypes are the built-in broadcast message types of the mapping.
var MessageTypes = []string{"topic.create", "topic.grow", "topic.remap", "topic.delete"}

// MarkerTypes maps the message types whose records are markers in the
// logic queues they target (wal.KindMarker) to the marker's name: a remap
// writes a "remap" marker into each moved queue, at an offset like any
// message, which consumers of data skip (the read API shows it as
// "marker": "remap").
var MarkerTypes = map[string]string{"topic.remap": KindRemap}

// DomainTopic is the resource-key domain of topics.
const DomainTopic = "topic"

// Change is one mapping change: the payload of a topic.* broadcast.
type Change struct {
	Kind      string     `json:"kind"`
	Topic     string     `json:"topic"`
	Queues    int        `json:"queues,omitempty"`    // create, grow: the new total
	Brokers   []string   `json:"brokers,omitempty"`   // candidates/targets; empty = every configured broker
	Policy    string     `json:"policy,omitempty"`    // "" = the topic's policy (create: balanced)
	Retention *Retention `json:"retention,omitempty"` // create
}

// DecodeChange decodes a topic.* message payload (outside bytes: never
// panics). msgType must be one of MessageTypes; it sets Kind.
func DecodeChange(msgType string, payload []byte) (Change, error) {
	var c Change
	kind, ok := bytes.CutPrefix([]byte(msgType), []byte("topic."))
	if !ok {
		return c, fmt.Errorf("%w: message type %q is not a topic change", ErrInvalid, msgType)
	}
	dec := json.NewDecoder(bytes.NewReader(payload))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&c); err != nil {
		return c, fmt.Errorf("%w: %s payload: %v", ErrInvalid, msgType, err)
	}
	if c.Kind != "" && c.Kind != string(kind) {
		return c, fmt.Errorf("%w: payload kind %q does not match type %q", ErrInvalid, c.Kind, msgType)
	}
	c.Kind = string(kind)
	return c, c.check()
}

// Encode returns the message type and payload of c.
func (c Change) Encode() (string, []byte) { return "topic." + c.Kind, mustJSON(c) }

func (c Change) check() error {
	switch c.Kind {
	case KindCreate, KindGrow, KindRemap, KindDelete:
	default:
		return fmt.Errorf("%w: unknown change %q", ErrInvalid, c.Kind)
	}
	if c.Topic != ControlTopic {
		if err := ValidateTopicName(c.Topic); err != nil {
			return err
		}
	}
	if (c.Kind == KindCreate || c.Kind == KindGrow) && (c.Queues < 1 || c.Queues > MaxQueues) {
		return fmt.Errorf("%w: queues must be 1..%d, got %d", ErrInvalid, MaxQueues, c.Queues)
	}
	if c.Retention != nil && c.Retention.MaxAge < 0 {
		return fmt.Errorf("%w: retention max_age must be >= 0", ErrInvalid)
	}
	for _, b := range c.Brokers {
		if err := ValidateBrokerName(b); err != nil {
			return err
		}
	}
	return nil
}

// ResourceKeys are the keys a change takes: exclusive on its topic, so it
// serializes with every other change (and retention) of the topic.
func ResourceKeys(c Change) []abi.ResourceKey {
	return []abi.ResourceKey{TopicKey(c.Topic)}
}

// TopicKey is the exclusive resource key of a topic.
func TopicKey(topic string) abi.ResourceKey {
	return abi.ResourceKey{Domain: DomainTopic, Key: topic, Mode: abi.Exclusive}
}

// Plan is a computed change: the catalog writes and checks that apply it
// atomically.
type Plan struct {
	Change   Change
	NoChange bool   // nothing to write (e.g. remap to the same placement)
	Epoch    uint64 // the topic's epoch after the change
	Moved    []int  // remap: logic queues moved
	Ops      []catalog.Op
	Checks   []catalog.Check
	// RangeChecks: a delete's check that no group offset of the topic
	// was written after its snapshot.
	RangeChecks []catalog.RangeCheck
	// Created and Sealed physical queues (the WAL learns of them through
	// Mapping.Refresh after the commit).
	Created, Sealed []string
	// Dropped are physical queues removed after the commit: closed
	// segments' (and in Log mode every segment's) of a deleted topic, and
	// in Log mode the empty leaders a remap dropped.
	Dropped []string
}

// Batch returns the plan as a catalog batch.
func (p *Plan) Batch() *catalog.Batch {
	return &catalog.Batch{Checks: p.Checks, RangeChecks: p.RangeChecks, Ops: p.Ops}
}

// Validate checks c against snapshot r without writing anything: the
// broadcast validator of topic.* messages. The policy runs here too, so a
// bad policy output is rejected before the broadcast is persisted.
func (m *Mapping) Validate(ctx context.Context, r catalog.Reader, c Change) error {
	_, err := m.plan(ctx, r, c, true)
	return err
}

// DryRun computes c's plan on snapshot r without side effects (no queue
// ids are allocated, nothing is held): what a change would do.
func (m *Mapping) DryRun(ctx context.Context, r catalog.Reader, c Change) (*Plan, error) {
	return m.plan(ctx, r, c, true)
}

// PlanChange computes the writes that apply c to snapshot r (the ack
// callback of topic.* messages returns them to be committed with the
// TOMBSTONE). Queues moved by a remap are held: appends to them wait until
// Refresh sees the new mapping (or HoldTimeout passes), so the seal check
// in the plan cannot be starved by a stream of appends.
func (m *Mapping) PlanChange(ctx context.Context, r catalog.Reader, c Change) (*Plan, error) {
	return m.plan(ctx, r, c, false)
}

func (m *Mapping) resolveBrokers(names []string) ([]BrokerLoad, error) {
	if len(names) == 0 {
		names = m.brokerNames()
	}
	seen := map[string]bool{}
	var out []BrokerLoad
	for _, n := range names {
		b, ok := m.brokers[n]
		if !ok {
			return nil, fmt.Errorf("%w: %q (configured: %v)", ErrUnknownBroker, n, m.brokerNames())
		}
		if !seen[n] {
			seen[n] = true
			out = append(out, BrokerLoad{Name: n, Labels: b.Labels})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	m.mu.RLock()
	for i := range out {
		for _, c := range m.topics {
			for _, q := range c.queues {
				if q.Leader().Broker == out[i].Name {
					out[i].Load++
				}
			}
		}
	}
	m.mu.RUnlock()
	return out, nil
}

func (m *Mapping) policy(name string) (Policy, string, error) {
	if name == "" || name == BalancedName {
		return Balanced{}, "built-in", nil
	}
	p, ok := m.cfg.Policies[name]
	if !ok && m.cfg.LookupPolicy != nil {
		p, ok = m.cfg.LookupPolicy(name)
	}
	if !ok {
		known := []string{BalancedName}
		for n := range m.cfg.Policies {
			known = append(known, n)
		}
		sort.Strings(known)
		return nil, "", fmt.Errorf("%w: %q (known: %v)", ErrUnknownPolicy, name, known)
	}
	src := "plugin"
	if s, ok := p.(PolicySource); ok {
		src = s.Source()
	}
	return p, src, nil
}

func (m *Mapping) assign(ctx context.Context, name string, in PolicyInput) ([]string, error) {
	p, src, err := m.policy(name)
	if err != nil {
		return nil, err
	}
	if name == "" {
		name = BalancedName
	}
	out, err := p.Assign(ctx, in)
	if err != nil {
		return nil, &PolicyError{Policy: name, Source: src, Err: err}
	}
	if err := checkAssignment(in, out); err != nil {
		return nil, &PolicyError{Policy: name, Source: src, Err: err}
	}
	return out, nil
}

func (m *Mapping) plan(ctx context.Context, r catalog.Reader, c Change, dry bool) (_ *Plan, err error) {
	ctx, end := m.span(ctx, "plan."+c.Kind, attribute.String("hostd.topic", c.Topic), attribute.Bool("dry_run", dry))
	defer end(&err)
	if err := c.check(); err != nil {
		return nil, err
	}
	if c.Topic == ControlTopic && (c.Kind == KindGrow || c.Kind == KindDelete) {
		return nil, fmt.Errorf("%w: %s of %q is not allowed (it has exactly one logic queue)", ErrReserved, c.Kind, ControlTopic)
	}
	if c.Kind == KindDelete && slices.Contains(m.cfg.Pinned, c.Topic) {
		return nil, fmt.Errorf("%w: topic %q backs vchannels listed in the configuration (broadcast.vchannels); remove them there and restart before deleting it", ErrReserved, c.Topic)
	}
	p := &Plan{Change: c}
	var nextID uint64
	var idsLeft uint64
	alloc := func() (uint64, error) {
		if dry {
			nextID++
			return nextID, nil
		}
		if idsLeft == 0 {
			n := uint64(64)
			if c.Queues > 64 {
				n = uint64(c.Queues)
			}
			first, err := m.store.NextSequence(ctx, "mapping/queue", n)
			if err != nil {
				return 0, err
			}
			nextID, idsLeft = first, n
		}
		id := nextID
		nextID++
		idsLeft--
		return id, nil
	}
	newSegment := func(gen uint64, broker string, logic uint64) (Segment, error) {
		id, err := alloc()
		if err != nil {
			return Segment{}, err
		}
		s := Segment{Gen: gen, Broker: broker, QueueID: id, LogicOffset: logic}
		if m.log != nil {
			// Log mode: the queue is created now, before the plan
			// commits; if it never does, the queue is an orphan that
			// retention sweeps.
			if !dry {
				if s.StartOffset, err = m.createLogQueue(ctx, s.PhysicalQueue()); err != nil {
					return Segment{}, err
				}
			}
			p.Created = append(p.Created, s.PhysicalQueue())
			return s, nil
		}
		ops, checks, err := wal.CreateOps(s.PhysicalQueue())
		if err != nil {
			return Segment{}, err
		}
		p.Ops = append(p.Ops, ops...)
		p.Checks = append(p.Checks, checks...)
		p.Created = append(p.Created, s.PhysicalQueue())
		return s, nil
	}

	if c.Kind == KindCreate {
		if _, _, err := r.Get(topicKey(c.Topic)); err == nil {
			return nil, fmt.Errorf("%w: %q", ErrExists, c.Topic)
		} else if !errors.Is(err, catalog.ErrNotFound) {
			return nil, err
		}
		brokers, err := m.resolveBrokers(c.Brokers)
		if err != nil {
			return nil, err
		}
		in := PolicyInput{Topic: c.Topic, TotalQueues: c.Queues, Operation: OpCreate, Current: make([]string, c.Queues), Brokers: brokers}
		out, err := m.assign(ctx, c.Policy, in)
		if err != nil {
			return nil, err
		}
		t := &Topic{Name: c.Topic, Queues: c.Queues, Epoch: 1, Policy: c.Policy, Created: m.cfg.Clock.Now().UTC()}
		if t.Policy == "" {
			t.Policy = BalancedName
		}
		if c.Retention != nil {
			t.Retention = *c.Retention
		}
		qs := make([]*LogicQueue, c.Queues)
		for i, b := range out {
			s, err := newSegment(1, b, 0)
			if err != nil {
				return nil, err
			}
			qs[i] = &LogicQueue{Topic: c.Topic, ID: i, Segments: []Segment{s}}
		}
		if err := checkTopic(t, qs, map[string]string{}); err != nil {
			return nil, err
		}
		p.Epoch = t.Epoch
		p.Checks = append(p.Checks, catalog.Check{Key: topicKey(c.Topic), Version: 0})
		p.Ops = append(p.Ops, catalog.Op{Key: topicKey(c.Topic), Value: mustJSON(t)})
		for _, q := range qs {
			p.Ops = append(p.Ops, catalog.Op{Key: queueKey(c.Topic, q.ID), Value: mustJSON(q)})
		}
		return p, nil
	}

	cur, tver, qvers, err := loadTopicVersions(r, c.Topic)
	if err != nil {
		return nil, err
	}
	if err := checkTopic(cur.t, cur.queues, map[string]string{}); err != nil {
		return nil, err
	}
	t := *cur.t
	p.Epoch = t.Epoch
	p.Checks = append(p.Checks, catalog.Check{Key: topicKey(c.Topic), Version: tver})
	policy := c.Policy
	if policy == "" {
		policy = t.Policy
	}
	switch c.Kind {
	case KindDelete:
		p.Ops = append(p.Ops, catalog.Op{Key: topicKey(c.Topic), Delete: true})
		for i, q := range cur.queues {
			p.Checks = append(p.Checks, catalog.Check{Key: queueKey(c.Topic, i), Version: qvers[i]})
			p.Ops = append(p.Ops, catalog.Op{Key: queueKey(c.Topic, i), Delete: true})
			pq := q.Leader().PhysicalQueue()
			if m.log != nil {
				// Log mode: nothing to seal in the commit; the queues are
				// deleted after it (Committed), and appends wait on the
				// hold meanwhile.
				for _, s := range q.Segments {
					p.Dropped = append(p.Dropped, s.PhysicalQueue())
				}
				continue
			}
			_, ops, checks, err := wal.SealOps(r, pq)
			if err != nil {
				return nil, fmt.Errorf("mapping: delete %q: seal %s: %w", c.Topic, pq, err)
			}
			p.Ops = append(p.Ops, ops...)
			p.Checks = append(p.Checks, checks...)
			p.Sealed = append(p.Sealed, pq)
			for _, s := range q.Segments[:len(q.Segments)-1] {
				p.Dropped = append(p.Dropped, s.PhysicalQueue())
			}
		}
		// Group offsets and producer states go in the same commit: a topic
		// created later under the same name starts without them.
		if err := deleteTopicOffsets(r, c.Topic, p, m.log != nil); err != nil {
			return nil, err
		}
		p.Epoch = t.Epoch + 1
		if !dry {
			// Appends and group commits wait while the delete commits, so
			// a stream of them cannot starve its checks.
			all := make([]int, len(cur.queues))
			for i := range all {
				all[i] = i
			}
			m.holdQueues(c.Topic, all, cur)
		}
		return p, nil

	case KindGrow:
		if c.Queues < t.Queues {
			return nil, fmt.Errorf("%w: %q has %d queues, asked for %d", ErrShrink, c.Topic, t.Queues, c.Queues)
		}
		if c.Queues == t.Queues {
			p.NoChange = true
			return p, nil
		}
		brokers, err := m.resolveBrokers(c.Brokers)
		if err != nil {
			return nil, err
		}
		in := PolicyInput{Topic: c.Topic, TotalQueues: c.Queues, Operation: OpGrow, Current: make([]string, c.Queues), Brokers: brokers}
		for i, q := range cur.queues {
			in.Current[i] = q.Leader().Broker
		}
		// Existing queues on brokers outside the candidates stay put: the
		// candidates list only limits where new queues go.
		cand := map[string]bool{}
		for _, b := range brokers {
			cand[b.Name] = true
		}
		for i := range cur.queues {
			if !cand[in.Current[i]] {
				if b, ok := m.brokers[in.Current[i]]; ok {
					in.Brokers = append(in.Brokers, BrokerLoad{Name: b.Name, Labels: b.Labels})
				}
				cand[in.Current[i]] = true
			}
		}
		sort.Slice(in.Brokers, func(i, j int) bool { return in.Brokers[i].Name < in.Brokers[j].Name })
		out, err := m.assign(ctx, policy, in)
		if err != nil {
			return nil, err
		}
		qs := append([]*LogicQueue(nil), cur.queues...)
		for i := t.Queues; i < c.Queues; i++ {
			s, err := newSegment(1, out[i], 0)
			if err != nil {
				return nil, err
			}
			q := &LogicQueue{Topic: c.Topic, ID: i, Segments: []Segment{s}}
			qs = append(qs, q)
			p.Checks = append(p.Checks, catalog.Check{Key: queueKey(c.Topic, i), Version: 0})
			p.Ops = append(p.Ops, catalog.Op{Key: queueKey(c.Topic, i), Value: mustJSON(q)})
		}
		t.Queues = c.Queues
		t.Epoch++
		if err := checkTopic(&t, qs, map[string]string{}); err != nil {
			return nil, err
		}
		p.Epoch = t.Epoch
		p.Ops = append(p.Ops, catalog.Op{Key: topicKey(c.Topic), Value: mustJSON(&t)})
		return p, nil

	case KindRemap:
		brokers, err := m.resolveBrokers(c.Brokers)
		if err != nil {
			return nil, err
		}
		in := PolicyInput{Topic: c.Topic, TotalQueues: t.Queues, Operation: OpRemap, Current: make([]string, t.Queues), Brokers: brokers}
		for i, q := range cur.queues {
			in.Current[i] = q.Leader().Broker
		}
		out, err := m.assign(ctx, policy, in)
		if err != nil {
			return nil, err
		}
		qs := append([]*LogicQueue(nil), cur.queues...)
		if m.log != nil {
			if err := m.planRemapLog(ctx, p, c, cur, qvers, in.Current, out, qs, newSegment, dry); err != nil {
				return nil, err
			}
			out = in.Current // done: skip the WAL-mode loop below
		}
		for i, b := range out {
			if b == in.Current[i] {
				continue
			}
			p.Moved = append(p.Moved, i)
			old := cur.queues[i]
			lead := *old.Leader()
			pq := lead.PhysicalQueue()
			seal, ops, checks, err := wal.SealOps(r, pq)
			if err != nil {
				return nil, fmt.Errorf("mapping: remap %s: seal %s: %w", VChannel(c.Topic, i), pq, err)
			}
			segs := append([]Segment(nil), old.Segments[:len(old.Segments)-1]...)
			logic := lead.LogicOffset + (seal.End - lead.StartOffset)
			if seal.End == lead.StartOffset {
				// Empty leader: drop it instead of keeping an empty
				// closed segment (logic offsets stay strictly increasing).
				dops, dchecks, err := wal.DropEmptyOps(r, pq)
				if err != nil {
					return nil, err
				}
				p.Ops = append(p.Ops, dops...)
				p.Checks = append(p.Checks, dchecks...)
			} else {
				p.Ops = append(p.Ops, ops...)
				p.Checks = append(p.Checks, checks...)
				end := seal.End
				lead.EndOffset = &end
				lead.LastTick = seal.LastTick
				if first, err := wal.ReadFrom(r, pq, lead.StartOffset, 1); err == nil && len(first) == 1 {
					lead.FirstTick = first[0].Tick
				} else if b, berr := wal.ReadBounds(r, pq); berr == nil && b.Min < b.Max {
					if first, err := wal.ReadFrom(r, pq, b.Min, 1); err == nil && len(first) == 1 {
						lead.FirstTick = first[0].Tick
					}
				}
				segs = append(segs, lead)
			}
			p.Sealed = append(p.Sealed, pq)
			ns, err := newSegment(lead.Gen+1, b, logic)
			if err != nil {
				return nil, err
			}
			segs = append(segs, ns)
			nq := &LogicQueue{Topic: c.Topic, ID: i, Segments: segs}
			qs[i] = nq
			p.Checks = append(p.Checks, catalog.Check{Key: queueKey(c.Topic, i), Version: qvers[i]})
			p.Ops = append(p.Ops, catalog.Op{Key: queueKey(c.Topic, i), Value: mustJSON(nq)})
		}
		if len(p.Moved) == 0 {
			p.NoChange = true
			p.Ops, p.Checks = nil, nil
			return p, nil
		}
		t.Epoch++
		if err := checkTopic(&t, qs, map[string]string{}); err != nil {
			return nil, err
		}
		p.Epoch = t.Epoch
		p.Ops = append(p.Ops, catalog.Op{Key: topicKey(c.Topic), Value: mustJSON(&t)})
		if !dry {
			if m.log == nil { // Log mode held them before sealing
				m.holdQueues(c.Topic, p.Moved, cur)
			}
			failpoint.Hit("mapping.remap-planned")
		}
		return p, nil
	}
	return nil, fmt.Errorf("%w: unknown change %q", ErrInvalid, c.Kind)
}

// holdQueues makes appends to the moved queues wait for the remap.
func (m *Mapping) holdQueues(topic string, moved []int, cur *cached) {
	until := m.cfg.Clock.Now().Add(m.cfg.HoldTimeout)
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, i := range moved {
		vc := VChannel(topic, i)
		if h := m.holds[vc]; h != nil {
			h.until = until
			continue
		}
		m.holds[vc] = &hold{gen: cur.queues[i].Leader().Gen, until: until, ch: make(chan struct{})}
	}
}

// Apply computes and commits c directly (not as a broadcast): used at Open
// for the control topic and by tests. Production changes go through the
// broadcast engine (see doc.go), which commits PlanChange's ops with the
// task's TOMBSTONE and then calls Refresh.
func (m *Mapping) Apply(ctx context.Context, c Change) (*Plan, error) {
	for attempt := 0; ; attempt++ {
		var p *Plan
		err := m.store.View(ctx, func(r catalog.Reader) error {
			var err error
			p, err = m.PlanChange(ctx, r, c)
			return err
		})
		if err != nil {
			return nil, err
		}
		if p.NoChange {
			return p, m.Refresh(ctx, c.Topic)
		}
		_, err = m.store.Commit(ctx, p.Batch())
		if errors.Is(err, catalog.ErrConflict) && attempt < 20 {
			m.met.conflict.Add(ctx, 1)
			continue
		}
		if err != nil {
			_ = m.Refresh(ctx, c.Topic) // drop holds
			return nil, fmt.Errorf("mapping: %s %q: %w", c.Kind, c.Topic, err)
		}
		m.Committed(ctx, p)
		return p, nil
	}
}

// Committed updates the cache after p was committed (by Apply or by the
// broadcast engine with a TOMBSTONE), deletes the physical queues of a
// deleted topic, and counts the moved queues.
func (m *Mapping) Committed(ctx context.Context, p *Plan) {
	if err := m.Refresh(ctx, p.Change.Topic); err != nil {
		m.logger.Warn("mapping: refresh after commit", "topic", p.Change.Topic, "err", err)
	}
	for _, q := range append(append([]string(nil), p.Created...), p.Sealed...) {
		m.changed(q)
	}
	m.committedQueues(p.Created)
	m.met.moved.Add(ctx, int64(len(p.Moved)))
	if p.Change.Kind == KindRemap {
		// Log mode: empty leaders a remap dropped (WAL mode drops them in
		// the commit and lists none). A failure leaves an orphan that
		// retention sweeps.
		for _, q := range p.Dropped {
			if err := m.phys().Delete(ctx, q); err != nil && !errors.Is(err, wal.ErrNoQueue) {
				m.logger.Warn("mapping: delete dropped empty leader (retention sweeps it later)", "queue", q, "err", err)
			}
		}
	}
	if p.Change.Kind == KindDelete {
		// The producer states were deleted with the topic; forget the
		// cached ones so a topic created later under the name starts clean.
		pre := prefixProducer + p.Change.Topic + "\x00"
		m.prodMu.Lock()
		for k := range m.prods {
			if strings.HasPrefix(k, pre) {
				delete(m.prods, k)
			}
		}
		m.prodMu.Unlock()
		m.mu.Lock()
		for vc, h := range m.holds {
			if t, _, err := ParseVChannel(vc); err == nil && t == p.Change.Topic {
				close(h.ch)
				delete(m.holds, vc)
			}
		}
		m.mu.Unlock()
		for _, q := range append(append([]string(nil), p.Sealed...), p.Dropped...) {
			if err := m.phys().Delete(ctx, q); err != nil && !errors.Is(err, wal.ErrNoQueue) {
				m.logger.Warn("mapping: delete physical queue of deleted topic (retention sweeps it later)", "queue", q, "err", err)
			}
		}
	}
}

// planRemapLog is the remap of plan in Log mode: it holds the moved
// queues (appends wait), creates each new segment's physical queue, then
// seals each old leader on the Log and closes it at its data end
// (closeLeaderLog); a leader that never held an entry is dropped. The
// seals come last, after everything that can fail on its own (the policy
// ran before), so a plan that fails seals nothing if it can. A sealed
// leader whose plan never commits makes appends to it wait and then fail
// (see appendLog) until a remap of the queue commits: the broadcast
// engine retries the remap (its task is persisted before the ack), and
// the retried plan finds the queue sealed with the same data end.
func (m *Mapping) planRemapLog(ctx context.Context, p *Plan, c Change, cur *cached, qvers []catalog.Version,
	current, out []string, qs []*LogicQueue, newSegment func(uint64, string, uint64) (Segment, error), dry bool) error {
	for i, b := range out {
		if b != current[i] {
			p.Moved = append(p.Moved, i)
		}
	}
	if len(p.Moved) == 0 {
		return nil
	}
	if !dry {
		m.holdQueues(c.Topic, p.Moved, cur)
	}
	news := make([]Segment, len(p.Moved))
	for k, i := range p.Moved {
		ns, err := newSegment(cur.queues[i].Leader().Gen+1, out[i], 0)
		if err != nil {
			return err
		}
		news[k] = ns
	}
	for k, i := range p.Moved {
		old := cur.queues[i]
		lead := *old.Leader()
		pq := lead.PhysicalQueue()
		closed, ok, err := m.closeLeaderLog(ctx, lead, dry)
		if err != nil {
			return fmt.Errorf("mapping: remap %s: seal %s: %w", VChannel(c.Topic, i), pq, err)
		}
		segs := append([]Segment(nil), old.Segments[:len(old.Segments)-1]...)
		ns := news[k]
		ns.LogicOffset = lead.LogicOffset
		if ok {
			segs = append(segs, closed)
			ns.LogicOffset = closed.LogicOffset + closed.Len()
			p.Sealed = append(p.Sealed, pq)
		} else {
			p.Dropped = append(p.Dropped, pq)
		}
		segs = append(segs, ns)
		nq := &LogicQueue{Topic: c.Topic, ID: i, Segments: segs}
		qs[i] = nq
		p.Checks = append(p.Checks, catalog.Check{Key: queueKey(c.Topic, i), Version: qvers[i]})
		p.Ops = append(p.Ops, catalog.Op{Key: queueKey(c.Topic, i), Value: mustJSON(nq)})
	}
	return nil
}

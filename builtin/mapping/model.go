package mapping

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/hostd-dev/hostd/runtime/catalog"
)

// Key layout (all under catalog.NSMapping):
//
//	mp/t/<topic>                      topic record (JSON)
//	mp/q/<topic>\x00<queue BE4>       one logic queue: its segments (JSON)
//	mp/o/<topic>\x00<group>\x00<q BE4> consumer group offset
//	mp/p/<topic>\x00<q BE4><producer> producer idempotency state
//	mp/g/<group>\x00<topic>\x00<q BE4> legacy group offset (moved to mp/o/ by MigrateGroupOffsets)
const (
	prefixTopic       = catalog.NSMapping + "t/"
	prefixQueue       = catalog.NSMapping + "q/"
	prefixOffset      = catalog.NSMapping + "o/"
	prefixProducer    = catalog.NSMapping + "p/"
	prefixLegacyGroup = catalog.NSMapping + "g/"
)

// ControlTopic is the topic of the control channel "_control/0".
const ControlTopic = "_control"

// Name limits.
const (
	MaxTopicName  = 128
	MaxBrokerName = 64
	MaxQueues     = 100000
)

func topicKey(t string) []byte { return []byte(prefixTopic + t) }

func queueKey(t string, q int) []byte {
	k := []byte(prefixQueue + t + "\x00")
	return binary.BigEndian.AppendUint32(k, uint32(q))
}

func queueRange(t string) (start, end []byte) {
	return []byte(prefixQueue + t + "\x00"), []byte(prefixQueue + t + "\x01")
}

// Retention bounds how much of each logic queue is kept. Zero fields mean
// "no bound".
type Retention struct {
	MaxAge   time.Duration `json:"max_age,omitempty"`
	MaxBytes uint64        `json:"max_bytes,omitempty"`
}

// Topic is a static topic's record.
type Topic struct {
	Name      string    `json:"name"`
	Queues    int       `json:"queues"` // totalQueues: fixed at create, may only grow
	Epoch     uint64    `json:"epoch"`  // bumped by every change
	Policy    string    `json:"policy"` // policy used at create (default for grow/remap)
	Retention Retention `json:"retention"`
	Created   time.Time `json:"created"`
}

// Segment is one stretch of a logic queue stored in one physical queue.
type Segment struct {
	Gen         uint64 `json:"gen"`
	Broker      string `json:"broker"`
	QueueID     uint64 `json:"queue_id"`
	LogicOffset uint64 `json:"logic_offset"`
	StartOffset uint64 `json:"start_offset"`
	// EndOffset is the exclusive physical end; nil while the segment is
	// the open leader.
	EndOffset *uint64 `json:"end_offset,omitempty"`
	// First/LastTick are the ticks (Unix ns) of the segment's first and
	// last message, recorded when the segment is closed (0 = empty).
	FirstTick uint64 `json:"first_tick,omitempty"`
	LastTick  uint64 `json:"last_tick,omitempty"`
}

// Closed reports whether the segment has been closed by a remap.
func (s Segment) Closed() bool { return s.EndOffset != nil }

// PhysicalQueue is the WAL queue name of (Broker, QueueID).
func (s Segment) PhysicalQueue() string { return PhysicalQueue(s.Broker, s.QueueID) }

// PhysicalQueue names the WAL queue of (broker, queueID).
func PhysicalQueue(broker string, id uint64) string {
	return broker + "/" + strconv.FormatUint(id, 10)
}

// Len is the number of offsets a closed segment covers.
func (s Segment) Len() uint64 {
	if s.EndOffset == nil {
		return 0
	}
	return *s.EndOffset - s.StartOffset
}

// LogicQueue is one logic queue's ordered segment list; the last is the
// leader.
type LogicQueue struct {
	Topic    string    `json:"topic"`
	ID       int       `json:"id"`
	Segments []Segment `json:"segments"`
}

// Leader returns the open last segment.
func (q *LogicQueue) Leader() *Segment { return &q.Segments[len(q.Segments)-1] }

// VChannel names logic queue id of topic.
func VChannel(topic string, id int) string { return topic + "/" + strconv.Itoa(id) }

// ParseVChannel splits "topic/N".
func ParseVChannel(vc string) (string, int, error) {
	i := strings.LastIndexByte(vc, '/')
	if i <= 0 {
		return "", 0, fmt.Errorf("%w: vchannel %q is not topic/N", ErrInvalid, vc)
	}
	n, err := strconv.Atoi(vc[i+1:])
	if err != nil || n < 0 || strconv.Itoa(n) != vc[i+1:] {
		return "", 0, fmt.Errorf("%w: vchannel %q is not topic/N", ErrInvalid, vc)
	}
	return vc[:i], n, nil
}

// ValidateTopicName: 1..128 bytes of letters, digits, '.', '-', '_'.
func ValidateTopicName(s string) error {
	return validateName("topic", s, MaxTopicName)
}

// ValidateBrokerName: 1..64 bytes of letters, digits, '.', '-', '_'.
func ValidateBrokerName(s string) error {
	return validateName("broker", s, MaxBrokerName)
}

func validateName(kind, s string, max int) error {
	if s == "" || len(s) > max || !utf8.ValidString(s) {
		return fmt.Errorf("%w: %s name %q must be 1..%d bytes", ErrInvalid, kind, s, max)
	}
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '-' || r == '_') {
			return fmt.Errorf("%w: %s name %q may hold only letters, digits, '.', '-', '_'", ErrInvalid, kind, s)
		}
	}
	return nil
}

func decodeTopic(key, b []byte) (*Topic, error) {
	var t Topic
	if err := json.Unmarshal(b, &t); err != nil {
		return nil, &catalog.DecodeError{Key: key, Err: err}
	}
	if t.Queues < 1 || t.Queues > MaxQueues || ValidateTopicName(t.Name) != nil && t.Name != ControlTopic {
		return nil, &catalog.DecodeError{Key: key, Err: fmt.Errorf("bad topic record %q with %d queues", t.Name, t.Queues)}
	}
	return &t, nil
}

func decodeQueue(key, b []byte) (*LogicQueue, error) {
	var q LogicQueue
	if err := json.Unmarshal(b, &q); err != nil {
		return nil, &catalog.DecodeError{Key: key, Err: err}
	}
	return &q, nil
}

func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err) // our own plain structs always marshal
	}
	return b
}

// InvariantError names the topic, logic queue and segment that break an
// invariant. errors.Is(err, ErrInvariant) holds for it.
type InvariantError struct {
	Topic   string
	Queue   int // -1: the topic as a whole
	Segment int // index in the queue's segment list, -1 if none
	Reason  string
}

func (e *InvariantError) Error() string {
	if e.Segment >= 0 {
		return fmt.Sprintf("mapping: invariant violated in topic %q queue %d segment %d: %s", e.Topic, e.Queue, e.Segment, e.Reason)
	}
	if e.Queue >= 0 {
		return fmt.Sprintf("mapping: invariant violated in topic %q queue %d: %s", e.Topic, e.Queue, e.Reason)
	}
	return fmt.Sprintf("mapping: invariant violated in topic %q: %s", e.Topic, e.Reason)
}

// Is reports whether target is ErrInvariant.
func (e *InvariantError) Is(target error) bool { return target == ErrInvariant }

// checkTopic verifies every invariant of mapping.md on one topic: each
// logic queue 0..N-1 present with exactly one open leader (the last
// segment), gens and logic offsets strictly increasing without overlap,
// and no physical queue used twice. used collects physical queues across
// topics (pass one map for a whole catalog).
func checkTopic(t *Topic, qs []*LogicQueue, used map[string]string) error {
	if len(qs) != t.Queues {
		return &InvariantError{Topic: t.Name, Queue: -1, Segment: -1, Reason: fmt.Sprintf("has %d logic queues, record says %d", len(qs), t.Queues)}
	}
	for i, q := range qs {
		bad := func(seg int, f string, a ...any) error {
			return &InvariantError{Topic: t.Name, Queue: i, Segment: seg, Reason: fmt.Sprintf(f, a...)}
		}
		if q == nil {
			return bad(-1, "missing")
		}
		if q.ID != i || q.Topic != t.Name {
			return bad(-1, "record names %s/%d", q.Topic, q.ID)
		}
		if len(q.Segments) == 0 {
			return bad(-1, "has no segments (no leader)")
		}
		for j, s := range q.Segments {
			last := j == len(q.Segments)-1
			if last && s.Closed() {
				return bad(j, "leader is closed")
			}
			if !last && !s.Closed() {
				return bad(j, "a non-leader segment is open")
			}
			if s.Closed() && *s.EndOffset < s.StartOffset {
				return bad(j, "end offset %d before start %d", *s.EndOffset, s.StartOffset)
			}
			if s.Closed() && s.Len() == 0 {
				return bad(j, "closed segment is empty (empty segments are dropped when closed)")
			}
			if s.Broker == "" {
				return bad(j, "no broker")
			}
			pq := s.PhysicalQueue()
			if owner, dup := used[pq]; dup {
				return bad(j, "physical queue %s also used by %s", pq, owner)
			}
			used[pq] = fmt.Sprintf("%s/%d segment %d", t.Name, i, j)
			if j > 0 {
				p := q.Segments[j-1]
				if s.Gen <= p.Gen {
					return bad(j, "gen %d not greater than previous %d", s.Gen, p.Gen)
				}
				if s.LogicOffset != p.LogicOffset+p.Len() {
					return bad(j, "logic offset %d does not continue previous segment's end %d", s.LogicOffset, p.LogicOffset+p.Len())
				}
			}
		}
	}
	return nil
}

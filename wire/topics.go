package wire

import "time"

// RetentionRequest is a topic's retention in a create request: max_age a
// Go duration ("24h"), max_bytes in bytes.
type RetentionRequest struct {
	MaxAge   string `json:"max_age,omitempty"`
	MaxBytes uint64 `json:"max_bytes,omitempty"`
}

// TopicRequest is the body of POST /v1/topics (create) and of
// POST /v1/topics/{topic}/grow and /remap (without topic and retention).
type TopicRequest struct {
	Topic     string            `json:"topic,omitempty"` // create only
	Queues    int               `json:"queues,omitempty"`
	Brokers   []string          `json:"brokers,omitempty"`
	Policy    string            `json:"policy,omitempty"`
	Retention *RetentionRequest `json:"retention,omitempty"`
	DryRun    bool              `json:"dry_run,omitempty"`
}

// TopicChange is the answer of a create, grow, remap or delete.
type TopicChange struct {
	Kind        string     `json:"kind"`
	Topic       string     `json:"topic"`
	DryRun      bool       `json:"dry_run,omitempty"`
	NoChange    bool       `json:"no_change"`
	Epoch       uint64     `json:"epoch"`
	Moved       []int      `json:"moved,omitempty"`
	BroadcastID uint64     `json:"broadcast_id,omitempty"`
	Info        *TopicInfo `json:"info,omitempty"`
}

// Retention is a topic's retention as stored: max_age a Go duration
// ("24h0m0s"; absent: no age limit), max_bytes in bytes (absent: no size
// limit).
type Retention struct {
	MaxAge   string `json:"max_age,omitempty"`
	MaxBytes uint64 `json:"max_bytes,omitempty"`
}

// Topic is a static topic.
type Topic struct {
	Name      string    `json:"name"`
	Queues    int       `json:"queues"`
	Epoch     uint64    `json:"epoch"`
	Policy    string    `json:"policy"`
	Retention Retention `json:"retention"`
	Created   time.Time `json:"created"`
}

// Segment is one segment of a logic queue: a range of logic offsets stored
// in one physical queue.
type Segment struct {
	Gen         uint64  `json:"gen"`
	Broker      string  `json:"broker"`
	QueueID     uint64  `json:"queue_id"`
	LogicOffset uint64  `json:"logic_offset"`
	StartOffset uint64  `json:"start_offset"`
	EndOffset   *uint64 `json:"end_offset,omitempty"`
	FirstTick   Tick    `json:"first_tick,omitempty"`
	LastTick    Tick    `json:"last_tick,omitempty"`
}

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

// QueueInfo is one logic queue of a described topic.
type QueueInfo struct {
	ID       int           `json:"id"`
	VChannel string        `json:"vchannel"`
	Broker   string        `json:"broker"`
	Min      uint64        `json:"min"`
	Max      uint64        `json:"max"`
	Segments []SegmentInfo `json:"segments"`
}

// TopicInfo is the answer of GET /v1/topics/{topic}.
type TopicInfo struct {
	Topic  Topic         `json:"topic"`
	Queues []QueueInfo   `json:"queues"`
	Groups []GroupOffset `json:"groups,omitempty"`
}

// QueueOffsets is one logic queue's offsets.
type QueueOffsets struct {
	VChannel string  `json:"vchannel"`
	Min      uint64  `json:"min"`
	Max      uint64  `json:"max"`
	AtTime   *uint64 `json:"at_time,omitempty"` // first offset at or after ?time=
}

// GroupOffset is a consumer group's committed offset on one vchannel.
type GroupOffset struct {
	Group     string    `json:"group"`
	VChannel  string    `json:"vchannel"`
	Committed bool      `json:"committed"`
	Offset    uint64    `json:"offset"` // next offset to consume
	At        time.Time `json:"committed_at,omitzero"`
	Min       uint64    `json:"min"`
	Max       uint64    `json:"max"`
	Lag       uint64    `json:"lag"`
	Expired   bool      `json:"expired"`
}

// CommitOffsetRequest is the body of POST /v1/groups/{group}/offsets.
type CommitOffsetRequest struct {
	VChannel string  `json:"vchannel"`
	Offset   *uint64 `json:"offset"`
}

// Translation places one offset in both coordinate systems (answer of the
// translate routes).
type Translation struct {
	Topic       string `json:"topic"`
	Queue       int    `json:"queue"`
	VChannel    string `json:"vchannel"`
	LogicOffset uint64 `json:"logic_offset"`

	Broker         string `json:"broker"`
	QueueID        uint64 `json:"queue_id"`
	PhysicalQueue  string `json:"physical_queue"`
	PhysicalOffset uint64 `json:"physical_offset"`

	SegmentIndex int         `json:"segment_index"`
	Segment      SegmentInfo `json:"segment"`

	Retained bool   `json:"retained"`
	Min      uint64 `json:"min"`
	Max      uint64 `json:"max"`
}

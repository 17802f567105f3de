package wire

import "time"

// ChannelMessage is one message of a vchannel. Payload is base64.
type ChannelMessage struct {
	Offset      uint64            `json:"offset"`
	Queue       string            `json:"physical_queue"`
	QueueOffset uint64            `json:"physical_offset"`
	TimeTick    Tick              `json:"time_tick"`
	Time        time.Time         `json:"time"`
	Payload     []byte            `json:"payload"`
	Properties  map[string]string `json:"properties,omitempty"`
	// Kind is who wrote the message, stored in the record itself:
	// "data" (a client append), "broadcast" (the broadcast engine; its
	// hostd.* properties are hostd's), "marker" (a hostd marker, see
	// Marker) or "legacy" (written before kinds existed: data or
	// broadcast).
	Kind string `json:"kind"`
	// Marker names a marker message ("remap": the last message of a moved
	// queue's old segment). Consumers of data skip markers.
	Marker string `json:"marker,omitempty"`
}

// ReadResult is the answer of GET /v1/channels/{topic}/{queue}/messages:
// messages and where to continue.
type ReadResult struct {
	VChannel string           `json:"vchannel"`
	Messages []ChannelMessage `json:"messages"`
	Next     uint64           `json:"next"` // offset to read from next
	Min      uint64           `json:"min"`
	Max      uint64           `json:"max"`
}

// AppendRecord is one record of an append (payload base64, or
// payload_text).
type AppendRecord struct {
	Payload     []byte            `json:"payload,omitempty"`
	PayloadText string            `json:"payload_text,omitempty"`
	Properties  map[string]string `json:"properties,omitempty"`
}

// AppendRequest is the body of POST /v1/channels/{topic}/{queue}/messages.
// With a producer id, a retried (producer_id, seq) returns the original
// positions with duplicate true.
type AppendRequest struct {
	Records    []AppendRecord `json:"records"`
	ProducerID string         `json:"producer_id,omitempty"`
	Seq        uint64         `json:"seq,omitempty"`
}

// Position is where one appended record landed.
type Position struct {
	VChannel    string `json:"vchannel"`
	Offset      uint64 `json:"offset"`          // logic offset: continuous across remaps
	Queue       string `json:"physical_queue"`  // physical queue
	QueueOffset uint64 `json:"physical_offset"` // offset in Queue
	Tick        Tick   `json:"time_tick"`
}

// AppendResult is the answer of an append.
type AppendResult struct {
	Positions []Position `json:"positions"`
	Duplicate bool       `json:"duplicate"`
}

package api

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/hostd-dev/hostd/builtin/broadcast"
	"github.com/hostd-dev/hostd/builtin/mapping"
	"github.com/hostd-dev/hostd/runtime/wal"
	"github.com/hostd-dev/hostd/wire"
)

// ChannelService is what the vchannel read/append routes need (host adapts
// the mapping, or the 1:1 resolver, to it).
type ChannelService interface {
	Read(ctx context.Context, vchannel string, from uint64, limit int) ([]wal.Message, error)
	Bounds(ctx context.Context, vchannel string) (min, max uint64, err error)
	Wait(ctx context.Context, vchannel string, offset uint64) error
	// Append appends records; with a producer id, a retried (producer,
	// seq) returns the original positions and duplicate=true.
	Append(ctx context.Context, vchannel string, recs []wal.Record, producer string, seq uint64) ([]wal.Position, bool, error)
}

// Wire types of the vchannel routes (defined in package wire).
type (
	MessageJSON   = wire.ChannelMessage
	ReadResult    = wire.ReadResult
	AppendRecord  = wire.AppendRecord
	AppendRequest = wire.AppendRequest
	AppendResult  = wire.AppendResult
)

func messageJSON(m *wal.Message) MessageJSON {
	payload := m.Payload
	if payload == nil {
		payload = []byte{} // "" rather than null: payload is always a string
	}
	return MessageJSON{Offset: m.Offset, Queue: m.Queue, QueueOffset: m.QueueOffset,
		TimeTick: wire.Tick(m.Tick), Time: time.Unix(0, int64(m.Tick)).UTC(), Payload: payload, Properties: m.Props,
		Kind: m.Kind.String(), Marker: markerName(*m)}
}

func positionsJSON(in []wal.Position) []wire.Position {
	out := make([]wire.Position, len(in))
	for i, p := range in {
		out[i] = wire.Position{VChannel: p.VChannel, Offset: p.Offset, Queue: p.Queue, QueueOffset: p.QueueOffset, Tick: wire.Tick(p.Tick)}
	}
	return out
}

// MaxReadWait bounds a long-poll read's wait.
const MaxReadWait = 60 * time.Second

// RegisterChannels adds the vchannel routes (vchannel = topic/queue):
//
//	GET  /v1/channels/{topic}/{queue}/messages  read   ?from=N&limit=100&wait=10s (long-poll when from = max)
//	POST /v1/channels/{topic}/{queue}/messages  write  append {records, producer_id, seq}
//	GET  /v1/channels/{topic}/{queue}           read   min/max
func RegisterChannels(s *Server, svc ChannelService) {
	vc := func(r *http.Request) string { return r.PathValue("topic") + "/" + r.PathValue("queue") }
	s.Handle("GET /v1/channels/{topic}/{queue}/messages", RoleRead, func(w http.ResponseWriter, r *http.Request) error {
		v := vc(r)
		from, err := queryUint(r, "from", 0)
		if err != nil {
			return err
		}
		limit, err := queryUint(r, "limit", 100)
		if err != nil || limit < 1 || limit > MaxPageLimit {
			return InvalidField("limit", "limit must be in [1, %d]", MaxPageLimit)
		}
		var wait time.Duration
		if ws := r.URL.Query().Get("wait"); ws != "" {
			wait, err = time.ParseDuration(ws)
			if err != nil || wait < 0 || wait > MaxReadWait {
				return InvalidField("wait", "wait must be a duration in [0, %s], got %q", MaxReadWait, ws)
			}
		}
		msgs, err := svc.Read(r.Context(), v, from, int(limit))
		if err != nil {
			return err
		}
		if len(msgs) == 0 && wait > 0 {
			ctx, cancel := context.WithTimeout(r.Context(), wait)
			werr := svc.Wait(ctx, v, from)
			cancel()
			if werr == nil {
				if msgs, err = svc.Read(r.Context(), v, from, int(limit)); err != nil {
					return err
				}
			} else if r.Context().Err() != nil {
				return r.Context().Err()
			}
		}
		min, max, err := svc.Bounds(r.Context(), v)
		if err != nil {
			return err
		}
		out := ReadResult{VChannel: v, Messages: make([]MessageJSON, 0, len(msgs)), Next: from, Min: min, Max: max}
		for _, m := range msgs {
			out.Messages = append(out.Messages, messageJSON(&m))
			out.Next = m.Offset + 1
		}
		return WriteJSON(w, http.StatusOK, out)
	}, WithTimeout(MaxReadWait+10*time.Second))
	s.Handle("POST /v1/channels/{topic}/{queue}/messages", RoleWrite, func(w http.ResponseWriter, r *http.Request) error {
		var body AppendRequest
		if err := DecodeJSON(r, &body); err != nil {
			return err
		}
		if len(body.Records) == 0 {
			return InvalidField("records", "at least one record is required")
		}
		recs := make([]wal.Record, len(body.Records))
		for i, rec := range body.Records {
			if len(rec.Payload) > 0 && rec.PayloadText != "" {
				return InvalidField("records", "record %d: give payload or payload_text, not both", i)
			}
			// Appends write data records only; the hostd. namespace is
			// hostd's (the WAL refuses it too, on every write path).
			if err := wal.CheckProps(i, rec.Properties); err != nil {
				return reservedProperty(err)
			}
			recs[i] = wal.Record{Payload: rec.Payload, Props: rec.Properties, Kind: wal.KindData}
			if rec.PayloadText != "" {
				recs[i].Payload = []byte(rec.PayloadText)
			}
		}
		pos, dup, err := svc.Append(r.Context(), vc(r), recs, body.ProducerID, body.Seq)
		if err != nil {
			return err
		}
		return WriteJSON(w, http.StatusOK, AppendResult{Positions: positionsJSON(pos), Duplicate: dup})
	})
	s.Handle("GET /v1/channels/{topic}/{queue}", RoleRead, func(w http.ResponseWriter, r *http.Request) error {
		v := vc(r)
		min, max, err := svc.Bounds(r.Context(), v)
		if err != nil {
			return err
		}
		return WriteJSON(w, http.StatusOK, QueueOffsets{VChannel: v, Min: min, Max: max})
	})
}

// markerName returns the name of a marker message ("remap"), "" for any
// other message. Only a record of kind marker is one, whatever its
// properties say.
func markerName(m wal.Message) string {
	if m.Kind != wal.KindMarker {
		return ""
	}
	if n, ok := mapping.MarkerTypes[m.Props[broadcast.HeaderMessageType]]; ok {
		return n
	}
	return "marker"
}

// reservedProperty maps a *wal.ReservedPropertyError to 400
// invalid_argument naming the record's properties field and the property.
func reservedProperty(err error) *Error {
	var re *wal.ReservedPropertyError
	if !errors.As(err, &re) {
		return nil
	}
	return InvalidField(fmt.Sprintf("records[%d].properties", re.Record),
		"property %q of record %d is in the reserved %q namespace", re.Property, re.Record, wal.ReservedPrefix).
		With("property", re.Property).With("reason", "reserved")
}

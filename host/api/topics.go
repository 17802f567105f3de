package api

import (
	"context"
	"errors"
	"math"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/hostd-dev/hostd/builtin/mapping"
	"github.com/hostd-dev/hostd/runtime/wal"
	"github.com/hostd-dev/hostd/wire"
)

// TopicService is what the topic routes need (host adapts
// builtin/mapping and the broadcast engine to it).
type TopicService interface {
	// Change applies a topic change as a broadcast (dryRun: compute only).
	Change(ctx context.Context, c mapping.Change, dryRun bool) (*TopicChange, error)
	Describe(ctx context.Context, topic string) (*mapping.TopicInfo, error)
	List(ctx context.Context, after string, limit int) ([]mapping.Topic, bool, error)
	Bounds(ctx context.Context, vchannel string) (min, max uint64, err error)
	OffsetForTime(ctx context.Context, vchannel string, at time.Time) (uint64, error)
	// TranslateLogic places a logic offset of vchannel in its segment
	// and physical queue; TranslatePhysical does the reverse.
	TranslateLogic(ctx context.Context, vchannel string, offset uint64) (*mapping.Translation, error)
	TranslatePhysical(ctx context.Context, broker string, queueID, offset uint64) (*mapping.Translation, error)
}

// TopicChange is what TopicService.Change returns; the routes answer
// it as a wire.TopicChange.
type TopicChange struct {
	Kind        string
	Topic       string
	DryRun      bool
	NoChange    bool
	Epoch       uint64
	Moved       []int
	BroadcastID uint64
	Info        *mapping.TopicInfo
}

// Wire types of the topic routes (defined in package wire).
type (
	RetentionJSON = wire.RetentionRequest
	TopicRequest  = wire.TopicRequest
	QueueOffsets  = wire.QueueOffsets
)

func topicChangeJSON(in *TopicChange) wire.TopicChange {
	out := wire.TopicChange{Kind: in.Kind, Topic: in.Topic, DryRun: in.DryRun, NoChange: in.NoChange,
		Epoch: in.Epoch, Moved: in.Moved, BroadcastID: in.BroadcastID}
	if in.Info != nil {
		ti := topicInfoJSON(in.Info)
		out.Info = &ti
	}
	return out
}

func topicJSON(t *mapping.Topic) wire.Topic {
	return wire.Topic{Name: t.Name, Queues: t.Queues, Epoch: t.Epoch, Policy: t.Policy,
		Retention: wire.Retention{MaxAge: durationJSON(t.Retention.MaxAge), MaxBytes: t.Retention.MaxBytes}, Created: t.Created}
}

// durationJSON is a duration on the wire: a Go duration string, "" for
// none (a JSON number of nanoseconds would pass 2^53 after 104 days).
func durationJSON(d time.Duration) string {
	if d <= 0 {
		return ""
	}
	return d.String()
}

func segmentInfoJSON(s *mapping.SegmentInfo) wire.SegmentInfo {
	return wire.SegmentInfo{
		Segment: wire.Segment{Gen: s.Gen, Broker: s.Broker, QueueID: s.QueueID, LogicOffset: s.LogicOffset,
			StartOffset: s.StartOffset, EndOffset: s.EndOffset, FirstTick: wire.Tick(s.FirstTick), LastTick: wire.Tick(s.LastTick)},
		PhysicalQueue: s.PhysicalQueue, Open: s.Open, LogicEnd: s.LogicEnd, PhysMin: s.PhysMin, PhysMax: s.PhysMax,
		FirstTime: s.FirstTime, LastTime: s.LastTime,
	}
}

func groupOffsetJSON(g *mapping.GroupOffset) wire.GroupOffset {
	return wire.GroupOffset{Group: g.Group, VChannel: g.VChannel, Committed: g.Committed, Offset: g.Offset,
		At: g.At, Min: g.Min, Max: g.Max, Lag: g.Lag, Expired: g.Expired}
}

func groupOffsetsJSON(in []mapping.GroupOffset) []wire.GroupOffset {
	if in == nil {
		return nil
	}
	out := make([]wire.GroupOffset, len(in))
	for i := range in {
		out[i] = groupOffsetJSON(&in[i])
	}
	return out
}

func topicInfoJSON(in *mapping.TopicInfo) wire.TopicInfo {
	out := wire.TopicInfo{Topic: topicJSON(&in.Topic), Groups: groupOffsetsJSON(in.Groups)}
	out.Queues = make([]wire.QueueInfo, len(in.Queues)) // [] rather than null
	for i, q := range in.Queues {
		wq := wire.QueueInfo{ID: q.ID, VChannel: q.VChannel, Broker: q.Broker, Min: q.Min, Max: q.Max}
		wq.Segments = make([]wire.SegmentInfo, len(q.Segments))
		for j := range q.Segments {
			wq.Segments[j] = segmentInfoJSON(&q.Segments[j])
		}
		out.Queues[i] = wq
	}
	return out
}

func translationJSON(t *mapping.Translation) wire.Translation {
	return wire.Translation{Topic: t.Topic, Queue: t.Queue, VChannel: t.VChannel, LogicOffset: t.LogicOffset,
		Broker: t.Broker, QueueID: t.QueueID, PhysicalQueue: t.PhysicalQueue, PhysicalOffset: t.PhysicalOffset,
		SegmentIndex: t.SegmentIndex, Segment: segmentInfoJSON(&t.Segment), Retained: t.Retained, Min: t.Min, Max: t.Max}
}

// topicRoles are the roles of the topic changes, by mapping change kind:
// the routes below and the topic.<kind> broadcast types use the same
// table (BuiltinMessageRoles), so a broadcast cannot bypass a route's role.
var topicRoles = map[string]Role{
	mapping.KindCreate: RoleWrite,
	mapping.KindGrow:   RoleWrite,
	mapping.KindRemap:  RoleWrite,
	mapping.KindDelete: RoleAdmin,
}

// RegisterTopics adds the static-topic routes:
//
//	POST   /v1/topics                  write  create (as a topic.create broadcast)
//	GET    /v1/topics                  read   list (limit, page_token)
//	GET    /v1/topics/{topic}          read   describe: segments per logic queue, group lag
//	POST   /v1/topics/{topic}/grow     write  grow to queues
//	POST   /v1/topics/{topic}/remap    write  remap onto brokers (dry_run to preview)
//	DELETE /v1/topics/{topic}          admin  delete
//	GET    /v1/topics/{topic}/offsets  read   min/max per logic queue (?time=RFC3339: lookup)
//	GET    /v1/topics/{topic}/queues/{queue}/translate   read  ?logic_offset=N → segment, broker, physical queue and offset
//	GET    /v1/brokers/{broker}/queues/{queue}/translate read  ?physical_offset=N → topic, logic queue, logic offset
func RegisterTopics(s *Server, svc TopicService) {
	change := func(w http.ResponseWriter, r *http.Request, kind, topic string, body *TopicRequest) error {
		c := mapping.Change{Kind: kind, Topic: topic, Queues: body.Queues, Brokers: body.Brokers, Policy: body.Policy}
		if body.Retention != nil {
			if body.Retention.MaxBytes > wire.MaxSafeInteger {
				return InvalidField("retention.max_bytes", "max_bytes must be at most %d (2^53-1), got %d", uint64(wire.MaxSafeInteger), body.Retention.MaxBytes)
			}
			c.Retention = &mapping.Retention{MaxBytes: body.Retention.MaxBytes}
			if body.Retention.MaxAge != "" {
				d, err := time.ParseDuration(body.Retention.MaxAge)
				if err != nil || d < 0 {
					return InvalidField("retention.max_age", "max_age must be a duration such as \"24h\", got %q", body.Retention.MaxAge)
				}
				c.Retention.MaxAge = d
			}
		}
		res, err := svc.Change(r.Context(), c, body.DryRun)
		if err != nil {
			return err
		}
		status := http.StatusOK
		if kind == mapping.KindCreate && !body.DryRun {
			status = http.StatusCreated
		}
		return WriteJSON(w, status, topicChangeJSON(res))
	}
	s.Handle("POST /v1/topics", topicRoles[mapping.KindCreate], func(w http.ResponseWriter, r *http.Request) error {
		var body TopicRequest
		if err := DecodeJSON(r, &body); err != nil {
			return err
		}
		if body.Topic == "" {
			return InvalidField("topic", "topic is required")
		}
		return change(w, r, mapping.KindCreate, body.Topic, &body)
	})
	for _, kind := range []string{mapping.KindGrow, mapping.KindRemap} {
		s.Handle("POST /v1/topics/{topic}/"+kind, topicRoles[kind], func(w http.ResponseWriter, r *http.Request) error {
			var body TopicRequest
			if err := DecodeJSON(r, &body); err != nil {
				return err
			}
			if body.Topic != "" || body.Retention != nil {
				return InvalidField("topic", "topic and retention are set at create only")
			}
			return change(w, r, kind, r.PathValue("topic"), &body)
		})
	}
	s.Handle("DELETE /v1/topics/{topic}", topicRoles[mapping.KindDelete], func(w http.ResponseWriter, r *http.Request) error {
		return change(w, r, mapping.KindDelete, r.PathValue("topic"), &TopicRequest{DryRun: r.URL.Query().Get("dry_run") == "true"})
	})
	s.Handle("GET /v1/topics", RoleRead, func(w http.ResponseWriter, r *http.Request) error {
		page, err := PageParams(r)
		if err != nil {
			return err
		}
		after := ""
		if page.Token != "" {
			b, err := DecodePageToken(page.Token)
			if err != nil {
				return err
			}
			after = string(b)
		}
		items, more, err := svc.List(r.Context(), after, page.Limit)
		if err != nil {
			return err
		}
		tok := ""
		if more && len(items) > 0 {
			tok = EncodePageToken([]byte(items[len(items)-1].Name))
		}
		out := make([]wire.Topic, len(items))
		for i := range items {
			out[i] = topicJSON(&items[i])
		}
		return WriteList(w, out, tok)
	})
	s.Handle("GET /v1/topics/{topic}", RoleRead, func(w http.ResponseWriter, r *http.Request) error {
		ti, err := svc.Describe(r.Context(), r.PathValue("topic"))
		if err != nil {
			return err
		}
		return WriteJSON(w, http.StatusOK, topicInfoJSON(ti))
	})
	s.Handle("GET /v1/topics/{topic}/offsets", RoleRead, func(w http.ResponseWriter, r *http.Request) error {
		topic := r.PathValue("topic")
		var at *time.Time
		if v := r.URL.Query().Get("time"); v != "" {
			t, err := time.Parse(time.RFC3339Nano, v)
			if err != nil {
				return InvalidField("time", "time must be RFC 3339 (2026-01-02T15:04:05Z), got %q", v)
			}
			at = &t
		}
		ti, err := svc.Describe(r.Context(), topic)
		if err != nil {
			return err
		}
		out := make([]QueueOffsets, 0, len(ti.Queues))
		for _, q := range ti.Queues {
			qo := QueueOffsets{VChannel: q.VChannel, Min: q.Min, Max: q.Max}
			if at != nil {
				off, err := svc.OffsetForTime(r.Context(), q.VChannel, *at)
				if err != nil {
					return err
				}
				qo.AtTime = &off
			}
			out = append(out, qo)
		}
		return WriteList(w, out, "")
	})
	s.Handle("GET /v1/topics/{topic}/queues/{queue}/translate", RoleRead, func(w http.ResponseWriter, r *http.Request) error {
		vc, off, err := decodeTranslateLogic(r.PathValue("topic"), r.PathValue("queue"), r.URL.Query())
		if err != nil {
			return err
		}
		tr, err := svc.TranslateLogic(r.Context(), vc, off)
		if err != nil {
			return err
		}
		return WriteJSON(w, http.StatusOK, translationJSON(tr))
	})
	s.Handle("GET /v1/brokers/{broker}/queues/{queue}/translate", RoleRead, func(w http.ResponseWriter, r *http.Request) error {
		broker, id, off, err := decodeTranslatePhysical(r.PathValue("broker"), r.PathValue("queue"), r.URL.Query())
		if err != nil {
			return err
		}
		tr, err := svc.TranslatePhysical(r.Context(), broker, id, off)
		if err != nil {
			return err
		}
		return WriteJSON(w, http.StatusOK, translationJSON(tr))
	})
	s.MapErrors(mappingError)
}

// decodeTranslateLogic checks the path values and query of GET
// /v1/topics/{topic}/queues/{queue}/translate: a topic name, a logic queue
// id (decimal, no sign or leading zeros) and exactly one logic_offset. It
// returns the vchannel "topic/queue". Errors are invalid_argument naming
// the field; it never panics (FuzzTranslateRequest).
func decodeTranslateLogic(topic, queue string, q url.Values) (vchannel string, offset uint64, err error) {
	if topic != mapping.ControlTopic {
		if err := mapping.ValidateTopicName(topic); err != nil {
			return "", 0, InvalidField("topic", "%v", err)
		}
	}
	id, err := canonicalUint("queue", queue, mapping.MaxQueues-1)
	if err != nil {
		return "", 0, err
	}
	off, err := onlyParam(q, "logic_offset")
	if err != nil {
		return "", 0, err
	}
	return mapping.VChannel(topic, int(id)), off, nil
}

// decodeTranslatePhysical checks the path values and query of GET
// /v1/brokers/{broker}/queues/{queue}/translate: a broker name, a
// physical queue id and exactly one physical_offset. Errors are
// invalid_argument naming the field; it never panics.
func decodeTranslatePhysical(broker, queue string, q url.Values) (string, uint64, uint64, error) {
	if err := mapping.ValidateBrokerName(broker); err != nil {
		return "", 0, 0, InvalidField("broker", "%v", err)
	}
	id, err := canonicalUint("queue", queue, math.MaxUint64)
	if err != nil {
		return "", 0, 0, err
	}
	off, err := onlyParam(q, "physical_offset")
	if err != nil {
		return "", 0, 0, err
	}
	return broker, id, off, nil
}

// canonicalUint parses a decimal id as written by hostd: digits only, no
// sign, no leading zeros, at most max.
func canonicalUint(field, v string, max uint64) (uint64, error) {
	n, err := strconv.ParseUint(v, 10, 64)
	if err != nil || n > max || strconv.FormatUint(n, 10) != v {
		return 0, InvalidField(field, "%s must be a decimal integer in [0, %d], got %q", field, max, v)
	}
	return n, nil
}

// onlyParam reads the one query parameter name as a non-negative integer;
// a missing, repeated or unknown parameter is invalid_argument.
func onlyParam(q url.Values, name string) (uint64, error) {
	for k := range q {
		if k != name {
			return 0, InvalidField(k, "unknown query parameter %q (only %s)", k, name)
		}
	}
	vs := q[name]
	switch {
	case len(vs) == 0:
		return 0, InvalidField(name, "%s is required", name)
	case len(vs) > 1:
		return 0, InvalidField(name, "%s given %d times", name, len(vs))
	}
	return canonicalUint(name, vs[0], math.MaxUint64)
}

// mappingError maps builtin/mapping and runtime/wal errors to API errors.
func mappingError(err error) *Error {
	var re *mapping.RangeError
	var wre *wal.RangeError
	var pe *mapping.PolicyError
	var pre *mapping.PhysicalRangeError
	switch {
	case errors.As(err, &re):
		return Errorf(http.StatusRequestedRangeNotSatisfiable, CodeOffsetOutOfRange, "%v", err).
			With("min", re.Min).With("max", re.Max).With("vchannel", re.VChannel)
	case errors.As(err, &wre):
		return Errorf(http.StatusRequestedRangeNotSatisfiable, CodeOffsetOutOfRange, "%v", err).
			With("min", wre.Min).With("max", wre.Max).With("vchannel", wre.Queue)
	case errors.As(err, &pre):
		return Errorf(http.StatusRequestedRangeNotSatisfiable, CodeOffsetOutOfRange, "%v", err).
			With("min", pre.Start).With("max", pre.End).With("physical_queue", pre.PhysicalQueue).With("vchannel", pre.VChannel)
	case errors.As(err, &pe):
		return FailedPrecondition("%v", err).With("reason", "bad_policy_output").With("policy", pe.Policy).With("source", pe.Source)
	case errors.Is(err, mapping.ErrExists):
		return AlreadyExists("%v", err)
	case errors.Is(err, mapping.ErrNotFound), errors.Is(err, wal.ErrNoChannel):
		return NotFound("%v", err)
	case errors.Is(err, mapping.ErrShrink):
		return InvalidField("queues", "%v", err).With("reason", "shrink")
	case errors.Is(err, mapping.ErrUnknownBroker):
		return InvalidField("brokers", "%v", err).With("reason", "unknown_broker")
	case errors.Is(err, mapping.ErrUnknownPolicy):
		return InvalidField("policy", "%v", err).With("reason", "unknown_policy")
	case reservedProperty(err) != nil:
		return reservedProperty(err)
	case errors.Is(err, mapping.ErrReserved):
		return InvalidField("topic", "%v", err).With("reason", "reserved")
	case errors.Is(err, mapping.ErrInvalid), errors.Is(err, wal.ErrInvalid):
		return invalidFrom(err, "", fieldRule{"limit", "limit"}, fieldRule{"max_age", "retention.max_age"},
			fieldRule{"batch", "records"}, fieldRule{"no parts", "records"}, fieldRule{"queue name", "vchannel"})
	case errors.Is(err, mapping.ErrSequence):
		return Conflict("%v", err).With("reason", "producer_sequence")
	case errors.Is(err, wal.ErrTooLarge):
		return TooLarge("%v", err)
	}
	return nil
}

func queryUint(r *http.Request, name string, def uint64) (uint64, error) {
	v := r.URL.Query().Get(name)
	if v == "" {
		return def, nil
	}
	n, err := strconv.ParseUint(v, 10, 64)
	if err != nil {
		return 0, InvalidField(name, "%s must be a non-negative integer, got %q", name, v)
	}
	return n, nil
}

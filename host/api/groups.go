package api

import (
	"context"
	"net/http"

	"github.com/hostd-dev/hostd/builtin/mapping"
	"github.com/hostd-dev/hostd/wire"
)

// GroupService is what the consumer-group routes need (*mapping.Mapping).
type GroupService interface {
	CommitOffset(ctx context.Context, group, vchannel string, offset uint64) error
	GroupOffset(ctx context.Context, group, vchannel string) (mapping.GroupOffset, error)
	Lag(ctx context.Context, group, topic string) ([]mapping.GroupOffset, error)
}

// RegisterGroups adds the consumer-group routes:
//
//	POST /v1/groups/{group}/offsets   write  commit {vchannel, offset} (next offset to consume)
//	GET  /v1/groups/{group}/offsets   read   ?vchannel=topic/N: committed offset, min, max, lag
//	GET  /v1/groups/{group}/lag       read   ?topic=: every logic queue's offset and lag
func RegisterGroups(s *Server, svc GroupService) {
	s.Handle("POST /v1/groups/{group}/offsets", RoleWrite, func(w http.ResponseWriter, r *http.Request) error {
		var body wire.CommitOffsetRequest
		if err := DecodeJSON(r, &body); err != nil {
			return err
		}
		if err := checkVChannel(body.VChannel); err != nil {
			return err
		}
		if body.Offset == nil {
			return InvalidField("offset", "offset is required")
		}
		g := r.PathValue("group")
		if err := svc.CommitOffset(r.Context(), g, body.VChannel, *body.Offset); err != nil {
			return err
		}
		out, err := svc.GroupOffset(r.Context(), g, body.VChannel)
		if err != nil {
			return err
		}
		return WriteJSON(w, http.StatusOK, groupOffsetJSON(&out))
	})
	s.Handle("GET /v1/groups/{group}/offsets", RoleRead, func(w http.ResponseWriter, r *http.Request) error {
		vc := r.URL.Query().Get("vchannel")
		if err := checkVChannel(vc); err != nil {
			return err
		}
		out, err := svc.GroupOffset(r.Context(), r.PathValue("group"), vc)
		if err != nil {
			return err
		}
		return WriteJSON(w, http.StatusOK, groupOffsetJSON(&out))
	})
	s.Handle("GET /v1/groups/{group}/lag", RoleRead, func(w http.ResponseWriter, r *http.Request) error {
		t := r.URL.Query().Get("topic")
		if t == "" {
			return InvalidField("topic", "topic is required")
		}
		out, err := svc.Lag(r.Context(), r.PathValue("group"), t)
		if err != nil {
			return err
		}
		return WriteList(w, groupOffsetsJSON(out), "")
	})
}

// checkVChannel rejects a missing or malformed vchannel as
// invalid_argument (a well-formed one that does not exist is not_found).
func checkVChannel(vc string) error {
	if vc == "" {
		return InvalidField("vchannel", "vchannel is required")
	}
	if _, _, err := mapping.ParseVChannel(vc); err != nil {
		return InvalidField("vchannel", "vchannel %q: want topic/N, such as orders/0", vc)
	}
	return nil
}

package api

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/hostd-dev/hostd/builtin/broadcast"
	"github.com/hostd-dev/hostd/sdk/abi"
)

// BroadcastService is what the broadcast routes need (builtin/broadcast's
// *Engine implements it).
type BroadcastService interface {
	Submit(ctx context.Context, req *broadcast.Request) (*broadcast.Result, error)
	Get(id uint64) (*broadcast.TaskInfo, error)
	List(f broadcast.Filter) ([]broadcast.TaskInfo, uint64)
	Ack(ctx context.Context, id uint64, vchannel string) error
	Abandon(ctx context.Context, id uint64, by, reason string) (*broadcast.TaskInfo, error)
	Retry(ctx context.Context, id uint64) (*broadcast.TaskInfo, error)
}

// ResourceKeyJSON is a resource key on the wire: mode is "shared"
// (default) or "exclusive".
type ResourceKeyJSON struct {
	Domain string `json:"domain"`
	Key    string `json:"key"`
	Mode   string `json:"mode,omitempty"`
}

// BroadcastRequest is the body of POST /v1/broadcasts. Payload is base64
// (JSON []byte); PayloadText is an alternative for text payloads.
type BroadcastRequest struct {
	Type           string            `json:"type"`
	Payload        []byte            `json:"payload,omitempty"`
	PayloadText    string            `json:"payload_text,omitempty"`
	Properties     map[string]string `json:"properties,omitempty"`
	VChannels      []string          `json:"vchannels,omitempty"`
	ResourceKeys   []ResourceKeyJSON `json:"resource_keys,omitempty"`
	IdempotencyKey string            `json:"idempotency_key,omitempty"`
	Scope          broadcast.Scope   `json:"scope,omitempty"`
	AckSyncUp      *bool             `json:"ack_sync_up,omitempty"`
	// Wait: "done" (default), "appended" or "persisted".
	Wait string `json:"wait,omitempty"`
	// Timeout bounds the wait ("5s"); default and maximum: the request
	// timeout. When it ends first, an original request whose task is
	// persisted gets 202 with its ID and state PENDING; a duplicate, or an
	// original not persisted yet, gets 504 timeout (no ID).
	Timeout string `json:"timeout,omitempty"`
}

// BroadcastResult is the response of POST /v1/broadcasts.
type BroadcastResult struct {
	broadcast.Result
	// TimedOut: the wait ended before the requested point; the broadcast
	// is persisted and will complete.
	TimedOut bool `json:"timed_out,omitempty"`
}

// BroadcastTask is a task on the wire (resource-key modes as strings).
type BroadcastTask struct {
	broadcast.TaskInfo
	ResourceKeys []ResourceKeyJSON `json:"resource_keys"`
}

func taskJSON(in *broadcast.TaskInfo) BroadcastTask {
	out := BroadcastTask{TaskInfo: *in}
	for _, k := range in.ResourceKeys {
		out.ResourceKeys = append(out.ResourceKeys, ResourceKeyJSON{Domain: k.Domain, Key: k.Key, Mode: k.Mode.String()})
	}
	return out
}

type ackBody struct {
	VChannel string `json:"vchannel"`
}

type abandonBody struct {
	Reason string `json:"reason"`
}

// RegisterBroadcasts adds the broadcast routes:
//
//	POST /v1/broadcasts                  write  submit (wait=done|appended|persisted, timeout)
//	GET  /v1/broadcasts                  read   list (state, type, limit, page_token)
//	GET  /v1/broadcasts/{id}             read   get
//	POST /v1/broadcasts/{id}/acks        write  ack one vchannel (AckSyncUp)
//	POST /v1/broadcasts/{id}/abandon     admin  PENDING → FAILED (who/why recorded)
//	POST /v1/broadcasts/{id}/retry       admin  FAILED → PENDING
func RegisterBroadcasts(s *Server, svc BroadcastService) {
	s.Handle("POST /v1/broadcasts", RoleWrite, func(w http.ResponseWriter, r *http.Request) error {
		var body BroadcastRequest
		if err := DecodeJSON(r, &body); err != nil {
			return err
		}
		req, err := body.toRequest()
		if err != nil {
			return err
		}
		ctx := r.Context()
		if body.Timeout != "" {
			d, err := time.ParseDuration(body.Timeout)
			if err != nil || d <= 0 {
				return InvalidField("timeout", "timeout must be a positive duration such as \"5s\", got %q", body.Timeout)
			}
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeout(ctx, d)
			defer cancel()
		}
		res, err := svc.Submit(ctx, req)
		if err != nil {
			if res != nil && res.ID != 0 && (errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled)) {
				return WriteJSON(w, http.StatusAccepted, BroadcastResult{Result: *res, TimedOut: true})
			}
			return err
		}
		return WriteJSON(w, http.StatusOK, BroadcastResult{Result: *res})
	})
	s.Handle("GET /v1/broadcasts", RoleRead, func(w http.ResponseWriter, r *http.Request) error {
		page, err := PageParams(r)
		if err != nil {
			return err
		}
		f := broadcast.Filter{Limit: page.Limit, Type: r.URL.Query().Get("type")}
		switch st := broadcast.State(r.URL.Query().Get("state")); st {
		case "", broadcast.StatePending, broadcast.StateTombstone, broadcast.StateFailed:
			f.State = st
		default:
			return InvalidField("state", "state must be PENDING, TOMBSTONE or FAILED, got %q", st)
		}
		if page.Token != "" {
			pos, err := DecodePageToken(page.Token)
			if err != nil {
				return err
			}
			if f.After, err = strconv.ParseUint(string(pos), 10, 64); err != nil {
				return InvalidField("page_token", "malformed page token")
			}
		}
		items, next := svc.List(f)
		out := make([]BroadcastTask, 0, len(items))
		for i := range items {
			out = append(out, taskJSON(&items[i]))
		}
		tok := ""
		if next != 0 {
			tok = EncodePageToken([]byte(strconv.FormatUint(next, 10)))
		}
		return WriteList(w, out, tok)
	})
	s.Handle("GET /v1/broadcasts/{id}", RoleRead, func(w http.ResponseWriter, r *http.Request) error {
		id, err := pathID(r)
		if err != nil {
			return err
		}
		in, err := svc.Get(id)
		if err != nil {
			return err
		}
		return WriteJSON(w, http.StatusOK, taskJSON(in))
	})
	s.Handle("POST /v1/broadcasts/{id}/acks", RoleWrite, func(w http.ResponseWriter, r *http.Request) error {
		id, err := pathID(r)
		if err != nil {
			return err
		}
		var body ackBody
		if err := DecodeJSON(r, &body); err != nil {
			return err
		}
		if body.VChannel == "" {
			return InvalidField("vchannel", "vchannel is required")
		}
		if err := svc.Ack(r.Context(), id, body.VChannel); err != nil {
			return err
		}
		in, err := svc.Get(id)
		if err != nil {
			return err
		}
		return WriteJSON(w, http.StatusOK, taskJSON(in))
	})
	s.Handle("POST /v1/broadcasts/{id}/abandon", RoleAdmin, func(w http.ResponseWriter, r *http.Request) error {
		id, err := pathID(r)
		if err != nil {
			return err
		}
		var body abandonBody
		if err := DecodeJSON(r, &body); err != nil {
			return err
		}
		if body.Reason == "" {
			return InvalidField("reason", "reason is required (it is recorded with the task)")
		}
		who := "anonymous"
		if p, ok := PrincipalFrom(r.Context()); ok {
			who = p.Name
		}
		in, err := svc.Abandon(r.Context(), id, who, body.Reason)
		if err != nil {
			return err
		}
		return WriteJSON(w, http.StatusOK, taskJSON(in))
	})
	s.Handle("POST /v1/broadcasts/{id}/retry", RoleAdmin, func(w http.ResponseWriter, r *http.Request) error {
		id, err := pathID(r)
		if err != nil {
			return err
		}
		in, err := svc.Retry(r.Context(), id)
		if err != nil {
			return err
		}
		return WriteJSON(w, http.StatusOK, taskJSON(in))
	})
	s.MapErrors(broadcastError)
}

func pathID(r *http.Request) (uint64, error) {
	s := r.PathValue("id")
	id, err := strconv.ParseUint(s, 10, 64)
	if err != nil || id == 0 {
		return 0, InvalidField("id", "broadcast id must be a positive integer, got %q", s)
	}
	return id, nil
}

func (b *BroadcastRequest) toRequest() (*broadcast.Request, error) {
	if b.Type == "" {
		return nil, InvalidField("type", "type is required")
	}
	if len(b.Payload) > 0 && b.PayloadText != "" {
		return nil, InvalidField("payload", "give payload or payload_text, not both")
	}
	req := &broadcast.Request{
		Message:        broadcast.Message{Type: b.Type, Payload: b.Payload, Properties: b.Properties},
		VChannels:      b.VChannels,
		IdempotencyKey: b.IdempotencyKey,
		Scope:          b.Scope,
		AckSyncUp:      b.AckSyncUp,
		Wait:           broadcast.Wait(b.Wait),
	}
	if b.PayloadText != "" {
		req.Message.Payload = []byte(b.PayloadText)
	}
	for i, k := range b.ResourceKeys {
		rk := abi.ResourceKey{Domain: k.Domain, Key: k.Key}
		switch k.Mode {
		case "", "shared":
		case "exclusive":
			rk.Mode = abi.Exclusive
		default:
			return nil, InvalidField(fmt.Sprintf("resource_keys[%d].mode", i), "mode must be shared or exclusive, got %q", k.Mode)
		}
		if k.Domain == "" || k.Key == "" {
			return nil, InvalidField(fmt.Sprintf("resource_keys[%d]", i), "domain and key are required")
		}
		req.ResourceKeys = append(req.ResourceKeys, rk)
	}
	return req, nil
}

// broadcastError maps builtin/broadcast errors to API errors.
func broadcastError(err error) *Error {
	var rej *broadcast.RejectedError
	var tl *broadcast.TooLargeError
	switch {
	case errors.As(err, &rej):
		return FailedPrecondition("%v", err).With("reason", "rejected").With("type", rej.Type)
	case errors.Is(err, broadcast.ErrUnknownType):
		return InvalidField("type", "%v", err).With("reason", "unknown_type")
	case errors.Is(err, broadcast.ErrUnknownVChannel):
		return InvalidField("vchannels", "%v", err).With("reason", "unknown_vchannel")
	case errors.Is(err, broadcast.ErrKeyTooLong):
		return InvalidField("idempotency_key", "%v", err).With("reason", "key_too_long")
	case errors.Is(err, broadcast.ErrInvalidRequest):
		return invalidFrom(err, "resource_keys", fieldRule{"message type", "type"}, fieldRule{"property", "properties"},
			fieldRule{"scope", "scope"}, fieldRule{"wait must", "wait"}, fieldRule{"vchannel", "vchannels"})
	case errors.As(err, &tl):
		return TooLarge("%v", err).With("what", tl.What).With("size", tl.Size).With("limit", tl.Limit).With("limit_option", tl.LimitOption)
	case errors.Is(err, broadcast.ErrTooLarge):
		return TooLarge("%v", err)
	case errors.Is(err, broadcast.ErrNotFound):
		return NotFound("%v", err)
	case errors.Is(err, broadcast.ErrInvalidState):
		return Conflict("%v", err)
	case errors.Is(err, broadcast.ErrNotAckable):
		return FailedPrecondition("%v", err).With("reason", "not_appended")
	case errors.Is(err, broadcast.ErrClosed), errors.Is(err, broadcast.ErrNotStarted):
		return Unavailable("%v", err)
	case errors.Is(err, context.DeadlineExceeded):
		return Errorf(http.StatusGatewayTimeout, CodeTimeout, "gave up waiting for the broadcast: %v", err)
	}
	return nil
}

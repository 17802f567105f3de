package api

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/hostd-dev/hostd/builtin/broadcast"
	"github.com/hostd-dev/hostd/runtime/wal"
	"github.com/hostd-dev/hostd/sdk/abi"
	"github.com/hostd-dev/hostd/wire"
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
	Locks(f broadcast.LockFilter) []broadcast.KeyLock
}

// BroadcastLock and its parts are defined in package wire.
type (
	BroadcastLock       = wire.BroadcastLock
	BroadcastLockHolder = wire.BroadcastLockHolder
	BroadcastLockWaiter = wire.BroadcastLockWaiter
)

func lockJSON(kl broadcast.KeyLock) BroadcastLock {
	out := BroadcastLock{Domain: kl.Domain, Key: kl.Key, Mode: kl.Mode.String(), Holders: []BroadcastLockHolder{}}
	for _, h := range kl.Holders {
		out.Holders = append(out.Holders, BroadcastLockHolder{BroadcastID: h.BroadcastID, Type: h.Type, Mode: h.Mode.String(), Since: h.Since})
	}
	for _, w := range kl.Waiters {
		out.Waiters = append(out.Waiters, BroadcastLockWaiter{BroadcastID: w.BroadcastID, Type: w.Type, Mode: w.Mode.String(), Since: w.Since, BlockedHere: w.BlockedHere})
	}
	return out
}

// Wire types of the broadcast routes (defined in package wire).
type (
	ResourceKeyJSON  = wire.ResourceKey
	BroadcastRequest = wire.BroadcastRequest
	BroadcastResult  = wire.BroadcastResult
	BroadcastTask    = wire.BroadcastTask
)

func checkpointJSON(c *broadcast.Checkpoint) wire.Checkpoint {
	return wire.Checkpoint{VChannel: c.VChannel, Offset: c.Offset, PhysicalQueue: c.PhysicalQueue, TimeTick: wire.Tick(c.TimeTick)}
}

func resultJSON(in *broadcast.Result, timedOut bool) BroadcastResult {
	out := BroadcastResult{ID: in.ID, Duplicate: in.Duplicate, State: string(in.State), Error: in.Error, TimedOut: timedOut}
	for i := range in.Appends {
		out.Appends = append(out.Appends, checkpointJSON(&in.Appends[i]))
	}
	return out
}

func taskJSON(in *broadcast.TaskInfo) BroadcastTask {
	out := BroadcastTask{
		ID: in.ID, State: string(in.State),
		Message:        wire.Message{Type: in.Message.Type, Payload: in.Message.Payload, Properties: in.Message.Properties},
		IdempotencyKey: in.IdempotencyKey, Scope: wire.Scope{Kind: in.Scope.Kind, ID: in.Scope.ID},
		AckSyncUp: in.AckSyncUp, Attempts: in.Attempts, Conflicts: in.Conflicts, LastError: in.LastError,
		NextRetry: in.NextRetry, MissingAcks: in.MissingAcks, TraceID: in.TraceID,
		CreatedAt: in.CreatedAt, FinishedAt: in.FinishedAt,
	}
	// Lists are [] rather than null in answers.
	out.VChannels = make([]wire.VChannelStatus, 0, len(in.VChannels))
	out.ResourceKeys = make([]ResourceKeyJSON, 0, len(in.ResourceKeys))
	for _, v := range in.VChannels {
		vs := wire.VChannelStatus{Name: v.Name, Acked: v.Acked, Attempts: v.Attempts, LastError: v.LastError}
		if v.Checkpoint != nil {
			c := checkpointJSON(v.Checkpoint)
			vs.Checkpoint = &c
		}
		out.VChannels = append(out.VChannels, vs)
	}
	if in.Abandoned != nil {
		out.Abandoned = &wire.Abandon{By: in.Abandoned.By, Reason: in.Abandoned.Reason, At: in.Abandoned.At}
	}
	for _, k := range in.ResourceKeys {
		out.ResourceKeys = append(out.ResourceKeys, ResourceKeyJSON{Domain: k.Domain, Key: k.Key, Mode: k.Mode.String()})
	}
	return out
}

// MessageRoles returns the role a token needs to broadcast msgType
// (BuiltinMessageRoles for hostd's own types; a plugin's types declare
// theirs at registration; RoleWrite for the rest).
type MessageRoles func(msgType string) Role

// BuiltinMessageRoles are the roles of hostd's built-in message types:
// each topic.* type needs what its topic route needs (TopicRoutes), noop
// needs write.
func BuiltinMessageRoles() map[string]Role {
	m := map[string]Role{broadcast.NoopType: RoleWrite}
	for kind, role := range topicRoles {
		m["topic."+kind] = role
	}
	return m
}

// RegisterBroadcasts adds the broadcast routes:
//
//	POST /v1/broadcasts                  write  submit (wait=done|appended|persisted, timeout)
//	GET  /v1/broadcasts                  read   list (state, type, limit, page_token)
//	GET  /v1/broadcasts/{id}             read   get
//	POST /v1/broadcasts/{id}/acks        write  ack one vchannel (AckSyncUp)
//	POST /v1/broadcasts/{id}/abandon     admin  PENDING → FAILED (who/why recorded)
//	POST /v1/broadcasts/{id}/retry       admin  FAILED → PENDING
//	GET  /v1/broadcast-locks             read   resource keys held/awaited by broadcasts (domain, key)
//
// Every message type needs a role to be broadcast (roles; nil: RoleWrite
// for every type): POST /v1/broadcasts answers 403 permission_denied with
// details.type, role and required_role when the token's role is weaker,
// so a broadcast can never do what the matching route forbids (a write
// token cannot delete a topic through a topic.delete broadcast).
func RegisterBroadcasts(s *Server, svc BroadcastService, roles MessageRoles) {
	s.Handle("GET /v1/broadcast-locks", RoleRead, func(w http.ResponseWriter, r *http.Request) error {
		q := r.URL.Query()
		f := broadcast.LockFilter{Domain: q.Get("domain"), Key: q.Get("key")}
		if f.Key != "" && f.Domain == "" {
			return InvalidField("domain", "a key filter needs its domain (domain=…&key=…)")
		}
		locks := svc.Locks(f)
		out := make([]BroadcastLock, 0, len(locks))
		for _, kl := range locks {
			out = append(out, lockJSON(kl))
		}
		return WriteList(w, out, "")
	})
	s.Handle("POST /v1/broadcasts", RoleWrite, func(w http.ResponseWriter, r *http.Request) error {
		var body BroadcastRequest
		if err := DecodeJSON(r, &body); err != nil {
			return err
		}
		if roles != nil && body.Type != "" {
			p, _ := PrincipalFrom(r.Context())
			if need := roles(body.Type); p.Role < need {
				return PermissionDenied("token %q has role %s; broadcasting a %q message needs %s", p.Name, p.Role, body.Type, need).
					With("type", body.Type).With("role", p.Role.String()).With("required_role", need.String())
			}
		}
		req, err := broadcastRequest(&body)
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
				return WriteJSON(w, http.StatusAccepted, resultJSON(res, true))
			}
			return err
		}
		return WriteJSON(w, http.StatusOK, resultJSON(res, false))
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
		var body wire.AckRequest
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
		var body wire.AbandonRequest
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

// broadcastRequest checks a POST /v1/broadcasts body and converts it.
func broadcastRequest(b *BroadcastRequest) (*broadcast.Request, error) {
	if b.Type == "" {
		return nil, InvalidField("type", "type is required")
	}
	if len(b.Payload) > 0 && b.PayloadText != "" {
		return nil, InvalidField("payload", "give payload or payload_text, not both")
	}
	if err := wal.CheckProps(0, b.Properties); err != nil {
		var re *wal.ReservedPropertyError
		errors.As(err, &re)
		return nil, InvalidField("properties", "property %q is in the reserved %q namespace", re.Property, wal.ReservedPrefix).
			With("property", re.Property).With("reason", "reserved")
	}
	req := &broadcast.Request{
		Message:        broadcast.Message{Type: b.Type, Payload: b.Payload, Properties: b.Properties},
		VChannels:      b.VChannels,
		IdempotencyKey: b.IdempotencyKey,
		Scope:          broadcast.Scope{Kind: b.Scope.Kind, ID: b.Scope.ID},
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
	var ic *broadcast.IdempotencyConflictError
	var lw *broadcast.LockWaitError
	switch {
	case errors.As(err, &ic):
		return Conflict("%v", err).With("reason", "idempotency_key_reused").With("original_id", ic.OriginalID)
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
	case errors.As(err, &lw) && errors.Is(err, context.DeadlineExceeded):
		ids := lw.Holders
		if ids == nil {
			ids = []uint64{}
		}
		return Errorf(http.StatusGatewayTimeout, CodeTimeout, "gave up waiting for the broadcast: %v", err).
			With("waiting_for", lw.Key.Domain+":"+lw.Key.Key).With("holders", ids)
	case errors.Is(err, context.DeadlineExceeded):
		return Errorf(http.StatusGatewayTimeout, CodeTimeout, "gave up waiting for the broadcast: %v", err)
	}
	return nil
}

package api

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/hostd-dev/hostd/builtin/locks"
	"github.com/hostd-dev/hostd/sdk/abi"
	"github.com/hostd-dev/hostd/wire"
)

// Error codes of the lock and presence routes (docs/api.md).
const (
	CodeLocked     = "locked"       // 409: held by someone else; details.holders (owner, meta; never tokens)
	CodeNotHolder  = "not_holder"   // 409: unknown grant, wrong token, released, evicted, or stale fence
	CodeExpired    = "expired"      // 410: the grant's TTL ran out; it is never re-acquired by renew
	CodeTTLTooLong = "ttl_too_long" // 400: ttl above locks.max_ttl
	CodeInvalidKey = "invalid_key"  // 400: empty/overlong domain or key, bad mode, no keys
)

// MaxLockWait bounds the wait of POST /v1/locks (the route has no request
// timeout of its own: wait bounds it, and a client disconnect cancels it).
const MaxLockWait = 10 * time.Minute

// LockService is what the lock routes need (builtin/locks' *Service).
type LockService interface {
	Acquire(ctx context.Context, r locks.AcquireRequest) (*locks.Grant, error)
	Renew(ctx context.Context, id, token string, ttl time.Duration) (*locks.Grant, error)
	Release(ctx context.Context, id, token string) error
	List(after uint64, limit int) []locks.GrantView
	Get(id string) (locks.GrantView, error)
	Inspect(key abi.ResourceKey) (locks.KeyView, error)
	CheckFence(key abi.ResourceKey, fence uint64) error
	ForceRelease(ctx context.Context, key abi.ResourceKey, grantID, reason, actor string) (*locks.ForceReleaseResult, error)
	Audit(ctx context.Context, after uint64, limit int) ([]locks.AuditRecord, error)
}

// PresenceService is what the presence routes need (*locks.Presence).
type PresenceService interface {
	Announce(ctx context.Context, key, holder string, meta map[string]string, ttl time.Duration, token string) (locks.PresenceEntry, string, error)
	Withdraw(ctx context.Context, key, holder, token string) error
	Who(ctx context.Context, key string) ([]locks.PresenceEntry, error)
}

// Wire types of the lock and presence routes (defined in package wire).
type (
	AcquireLockRequest   = wire.AcquireLockRequest
	KeyFence             = wire.LockKey
	LockGrant            = wire.LockGrant
	LockHolder           = wire.LockHolder
	LockWaiter           = wire.LockWaiter
	LockKeyState         = wire.LockKeyState
	LockTokenRequest     = wire.LockTokenRequest
	ForceReleaseRequest  = wire.ForceReleaseRequest
	ForceReleaseResponse = wire.ForceReleaseResult
	CheckFenceRequest    = wire.CheckFenceRequest
	AnnounceRequest      = wire.AnnounceRequest
	AnnounceResponse     = wire.PresenceEntry
	WithdrawRequest      = wire.WithdrawRequest
)

func auditJSON(in []locks.AuditRecord) []wire.AuditRecord {
	out := make([]wire.AuditRecord, len(in))
	for i, a := range in {
		out[i] = wire.AuditRecord{ID: a.ID, At: a.At, Action: a.Action,
			Key:     wire.AuditKey{Domain: a.Key.Domain, Key: a.Key.Key, Mode: a.Key.Mode},
			GrantID: a.GrantID, Owner: a.Owner, Meta: a.Meta, OldFence: a.OldFence, NewFence: a.NewFence,
			Reason: a.Reason, Actor: a.Actor}
	}
	return out
}

func presenceJSON(e *locks.PresenceEntry, token string) wire.PresenceEntry {
	return wire.PresenceEntry{Key: e.Key, Holder: e.Holder, Meta: e.Meta, Since: e.Since, ExpiresAt: e.ExpiresAt, Token: token}
}

func modeString(m abi.LockMode) string { return m.String() }

// parseMode parses keys[i].mode (the field name is built only for an
// error: this is on every acquire's path).
func parseMode(i int, s string) (abi.LockMode, error) {
	switch s {
	case "", "exclusive":
		return abi.Exclusive, nil
	case "shared":
		return abi.Shared, nil
	}
	return 0, &Error{Status: http.StatusBadRequest, Code: CodeInvalidKey,
		Message: fmt.Sprintf("mode must be shared or exclusive, got %q", s), Details: map[string]any{"field": fmt.Sprintf("keys[%d].mode", i)}}
}

func parseDur(field, s string, def time.Duration) (time.Duration, error) {
	if s == "" {
		return def, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d < 0 {
		return 0, InvalidField(field, "%s must be a duration such as \"30s\", got %q", field, s)
	}
	return d, nil
}

// releasedAnswer is the body of a successful release ({"released":true}).
var releasedAnswer = wire.ReleaseResult{Released: true}

func grantJSON(g *locks.Grant) LockGrant {
	out := LockGrant{ID: g.ID, Token: g.Token, Owner: g.Owner, Meta: g.Meta, Fence: g.Fence,
		TTL: g.TTL.String(), ExpiresAt: g.ExpiresAt, CreatedAt: g.CreatedAt, Duplicate: g.Duplicate,
		Keys: make([]KeyFence, 0, len(g.Keys))}
	for _, k := range g.Keys {
		out.Keys = append(out.Keys, KeyFence{Domain: k.Domain, Key: k.Key, Mode: modeString(k.Mode), Fence: g.Fence})
	}
	return out
}

func grantViewJSON(g locks.GrantView) LockGrant {
	return grantJSON(&locks.Grant{ID: g.ID, Owner: g.Owner, Meta: g.Meta, Keys: g.Keys, Fence: g.Fence,
		TTL: g.TTL, ExpiresAt: g.ExpiresAt, CreatedAt: g.CreatedAt})
}

func holderJSON(h locks.HolderView) LockHolder {
	return LockHolder{GrantID: h.GrantID, Owner: h.Owner, Meta: h.Meta, Mode: modeString(h.Mode), Fence: h.Fence, ExpiresAt: h.ExpiresAt}
}

func seqPage(p Page) (uint64, error) {
	pos, err := DecodePageToken(p.Token)
	if err != nil || pos == nil {
		return 0, err
	}
	n, err := strconv.ParseUint(string(pos), 10, 64)
	if err != nil {
		return 0, InvalidField("page_token", "malformed page token")
	}
	return n, nil
}

func queryKey(r *http.Request) (abi.ResourceKey, error) {
	q := r.URL.Query()
	k := abi.ResourceKey{Domain: q.Get("domain"), Key: q.Get("key")}
	if k.Domain == "" || k.Key == "" {
		return k, &Error{Status: http.StatusBadRequest, Code: CodeInvalidKey, Message: "query parameters domain and key are required"}
	}
	return k, nil
}

// LeasePrincipal is the lease-lock principal of the request in ctx:
// locks.TokenPrincipal(token name) when authenticated with a token,
// locks.PrincipalAnonymous when auth is off. Idempotent lease retries and
// fenced plugin KV writes are scoped to it (docs/security.md).
func LeasePrincipal(ctx context.Context) string {
	if p, ok := PrincipalFrom(ctx); ok && p.Authenticated {
		return locks.TokenPrincipal(p.Name)
	}
	return locks.PrincipalAnonymous
}

func actor(ctx context.Context) string {
	if p, ok := PrincipalFrom(ctx); ok {
		return p.Name
	}
	return "anonymous"
}

// RegisterLocks adds the lease-lock and presence routes:
//
//	POST /v1/locks                    write  acquire {keys, ttl, wait, owner, meta, idempotency_key}
//	GET  /v1/locks                    read   list grants (limit, page_token); no tokens
//	GET  /v1/locks/{id}               read   one grant; no token
//	POST /v1/locks/{id}/renew         write  renew {token, ttl}
//	POST /v1/locks/{id}/release       write  release {token}
//	GET  /v1/locks/inspect            read   ?domain=&key= holders and waiters
//	POST /v1/locks/check-fence        read   {domain, key, fence}: 200 if current, 409 not_holder
//	POST /v1/locks/force-release      admin  {domain, key, grant_id, reason}: bumps the fence, audited
//	GET  /v1/locks/audit              read   audit records (limit, page_token)
//	POST /v1/presence                 write  announce {key, holder, meta, ttl, token}
//	POST /v1/presence/withdraw        write  withdraw {key, holder, token}
//	GET  /v1/presence                 read   ?key= who
func RegisterLocks(s *Server, svc LockService, pres PresenceService) {
	s.MapErrors(lockError)
	s.Handle("POST /v1/locks", RoleWrite, func(w http.ResponseWriter, r *http.Request) error {
		var body AcquireLockRequest
		if err := DecodeJSON(r, &body); err != nil {
			return err
		}
		// The principal comes from authentication, never from the body:
		// an idempotent retry returns a grant only to whoever took it.
		req := locks.AcquireRequest{Owner: body.Owner, Meta: body.Meta, IdempotencyKey: body.IdempotencyKey,
			Principal: LeasePrincipal(r.Context())}
		var err error
		if req.TTL, err = parseDur("ttl", body.TTL, 0); err != nil {
			return err
		}
		if req.Wait, err = parseDur("wait", body.Wait, 0); err != nil {
			return err
		}
		if req.Wait > MaxLockWait {
			return InvalidField("wait", "wait must be at most %s, got %s", MaxLockWait, req.Wait)
		}
		req.Keys = make([]abi.ResourceKey, 0, len(body.Keys))
		for i, k := range body.Keys {
			if k.Fence != 0 {
				return InvalidField(fmt.Sprintf("keys[%d].fence", i), "unknown field \"fence\" (a fence is given by the server)")
			}
			m, err := parseMode(i, k.Mode)
			if err != nil {
				return err
			}
			req.Keys = append(req.Keys, abi.ResourceKey{Domain: k.Domain, Key: k.Key, Mode: m})
		}
		g, err := svc.Acquire(r.Context(), req)
		if err != nil {
			return err
		}
		return WriteJSON(w, http.StatusOK, grantJSON(g))
	}, WithTimeout(-1))
	s.Handle("GET /v1/locks", RoleRead, func(w http.ResponseWriter, r *http.Request) error {
		p, err := PageParams(r)
		if err != nil {
			return err
		}
		after, err := seqPage(p)
		if err != nil {
			return err
		}
		gs := svc.List(after, p.Limit+1)
		next := ""
		if len(gs) > p.Limit {
			gs = gs[:p.Limit]
			next = EncodePageToken([]byte(strconv.FormatUint(gs[len(gs)-1].Fence, 10)))
		}
		out := make([]LockGrant, len(gs))
		for i, g := range gs {
			out[i] = grantViewJSON(g)
		}
		return WriteList(w, out, next)
	})
	s.Handle("GET /v1/locks/{id}", RoleRead, func(w http.ResponseWriter, r *http.Request) error {
		g, err := svc.Get(r.PathValue("id"))
		if err != nil {
			return err
		}
		return WriteJSON(w, http.StatusOK, grantViewJSON(g))
	})
	s.Handle("POST /v1/locks/{id}/renew", RoleWrite, func(w http.ResponseWriter, r *http.Request) error {
		var body LockTokenRequest
		if err := DecodeJSON(r, &body); err != nil {
			return err
		}
		ttl, err := parseDur("ttl", body.TTL, 0)
		if err != nil {
			return err
		}
		g, err := svc.Renew(r.Context(), r.PathValue("id"), body.Token, ttl)
		if err != nil {
			return err
		}
		return WriteJSON(w, http.StatusOK, grantJSON(g))
	})
	s.Handle("POST /v1/locks/{id}/release", RoleWrite, func(w http.ResponseWriter, r *http.Request) error {
		var body LockTokenRequest
		if err := DecodeJSON(r, &body); err != nil {
			return err
		}
		if body.TTL != "" {
			return InvalidField("ttl", "release takes no ttl")
		}
		if err := svc.Release(r.Context(), r.PathValue("id"), body.Token); err != nil {
			return err
		}
		return WriteJSON(w, http.StatusOK, releasedAnswer)
	})
	s.Handle("GET /v1/locks/inspect", RoleRead, func(w http.ResponseWriter, r *http.Request) error {
		k, err := queryKey(r)
		if err != nil {
			return err
		}
		kv, err := svc.Inspect(k)
		if err != nil {
			return err
		}
		out := LockKeyState{Domain: kv.Key.Domain, Key: kv.Key.Key, Mode: modeString(kv.Key.Mode), Holders: []LockHolder{}, Waiters: []LockWaiter{}}
		for _, h := range kv.Holders {
			out.Holders = append(out.Holders, holderJSON(h))
		}
		for _, wt := range kv.Waiters {
			out.Waiters = append(out.Waiters, LockWaiter{Owner: wt.Owner, Meta: wt.Meta, Mode: modeString(wt.Mode), Since: wt.Since})
		}
		return WriteJSON(w, http.StatusOK, out)
	})
	s.Handle("POST /v1/locks/check-fence", RoleRead, func(w http.ResponseWriter, r *http.Request) error {
		var body CheckFenceRequest
		if err := DecodeJSON(r, &body); err != nil {
			return err
		}
		if err := svc.CheckFence(abi.ResourceKey{Domain: body.Domain, Key: body.Key}, body.Fence); err != nil {
			return err
		}
		return WriteJSON(w, http.StatusOK, wire.CheckFenceResult{Current: true})
	})
	s.Handle("POST /v1/locks/force-release", RoleAdmin, func(w http.ResponseWriter, r *http.Request) error {
		var body ForceReleaseRequest
		if err := DecodeJSON(r, &body); err != nil {
			return err
		}
		if body.Reason == "" {
			return InvalidField("reason", "reason is required (it is written to the audit record)")
		}
		res, err := svc.ForceRelease(r.Context(), abi.ResourceKey{Domain: body.Domain, Key: body.Key}, body.GrantID, body.Reason, actor(r.Context()))
		if err != nil {
			return err
		}
		out := ForceReleaseResponse{Fence: res.Fence, Audit: auditJSON(res.Audit), Evicted: []LockGrant{}}
		for _, g := range res.Evicted {
			out.Evicted = append(out.Evicted, grantViewJSON(g))
		}
		return WriteJSON(w, http.StatusOK, out)
	})
	s.Handle("GET /v1/locks/audit", RoleRead, func(w http.ResponseWriter, r *http.Request) error {
		p, err := PageParams(r)
		if err != nil {
			return err
		}
		after, err := seqPage(p)
		if err != nil {
			return err
		}
		recs, err := svc.Audit(r.Context(), after, p.Limit+1)
		if err != nil {
			return err
		}
		next := ""
		if len(recs) > p.Limit {
			recs = recs[:p.Limit]
			next = EncodePageToken([]byte(strconv.FormatUint(recs[len(recs)-1].ID, 10)))
		}
		return WriteList(w, auditJSON(recs), next)
	})
	if pres == nil {
		return
	}
	s.Handle("POST /v1/presence", RoleWrite, func(w http.ResponseWriter, r *http.Request) error {
		var body AnnounceRequest
		if err := DecodeJSON(r, &body); err != nil {
			return err
		}
		ttl, err := parseDur("ttl", body.TTL, 0)
		if err != nil {
			return err
		}
		e, tok, err := pres.Announce(r.Context(), body.Key, body.Holder, body.Meta, ttl, body.Token)
		if err != nil {
			return err
		}
		return WriteJSON(w, http.StatusOK, presenceJSON(&e, tok))
	})
	s.Handle("POST /v1/presence/withdraw", RoleWrite, func(w http.ResponseWriter, r *http.Request) error {
		var body WithdrawRequest
		if err := DecodeJSON(r, &body); err != nil {
			return err
		}
		if err := pres.Withdraw(r.Context(), body.Key, body.Holder, body.Token); err != nil {
			return err
		}
		return WriteJSON(w, http.StatusOK, wire.WithdrawResult{Withdrawn: true})
	})
	s.Handle("GET /v1/presence", RoleRead, func(w http.ResponseWriter, r *http.Request) error {
		es, err := pres.Who(r.Context(), r.URL.Query().Get("key"))
		if err != nil {
			return err
		}
		out := make([]wire.PresenceEntry, len(es))
		for i := range es {
			out[i] = presenceJSON(&es[i], "")
		}
		return WriteList(w, out, "")
	})
}

// lockError maps builtin/locks errors to API errors with stable codes.
func lockError(err error) *Error {
	var ce *locks.LeaseConflictError
	if errors.As(err, &ce) {
		holders := make([]LockHolder, 0, len(ce.Holders))
		for _, h := range ce.Holders {
			holders = append(holders, holderJSON(h))
		}
		return &Error{Status: http.StatusConflict, Code: CodeLocked, Message: err.Error(), Details: map[string]any{
			"key":     ResourceKeyJSON{Domain: ce.Key.Domain, Key: ce.Key.Key, Mode: modeString(ce.Key.Mode)},
			"holders": holders, "waiters_ahead": ce.Waiters,
		}}
	}
	var ie *locks.IdempotencyConflictError
	if errors.As(err, &ie) {
		return Conflict("%v", err).With("original_id", ie.OriginalID).With("field", "idempotency_key")
	}
	e := lockCodeError(err)
	var fe *locks.FieldError
	if e != nil && errors.As(err, &fe) {
		e = e.With("field", fe.Field)
	}
	return e
}

func lockCodeError(err error) *Error {
	switch locks.ErrorCode(err) {
	case "locked":
		return Errorf(http.StatusConflict, CodeLocked, "%v", err)
	case "not_holder":
		return Errorf(http.StatusConflict, CodeNotHolder, "%v", err)
	case "expired":
		return Errorf(http.StatusGone, CodeExpired, "%v", err)
	case "ttl_too_long":
		return Errorf(http.StatusBadRequest, CodeTTLTooLong, "%v", err)
	case "invalid_key":
		return Errorf(http.StatusBadRequest, CodeInvalidKey, "%v", err)
	case "invalid_argument":
		return invalidFrom(err, "keys", fieldRule{"idempotency key", "idempotency_key"}, fieldRule{"owner", "owner"}, fieldRule{"meta", "meta"}, fieldRule{"ttl", "ttl"},
			fieldRule{"wait", "wait"}, fieldRule{"reason", "reason"})
	case "not_found":
		return NotFound("%v", err)
	case "unavailable":
		return Unavailable("%v", err)
	case "canceled":
		if errors.Is(err, locks.ErrCanceled) {
			return Errorf(499, CodeCanceled, "%v", err)
		}
	}
	return nil
}

package api

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/hostd-dev/hostd/runtime/sched"
)

// Role is what a token may do. Roles are ordered: a stronger role may do
// everything a weaker one may.
type Role int

const (
	// RolePublic routes need no token (health, readiness).
	RolePublic Role = iota
	// RoleRead may call read-only operations (get, list, watch, metrics).
	RoleRead
	// RoleWrite may also change state (broadcast, lock, create topic).
	RoleWrite
	// RoleAdmin may also administer (backup, plugin install, remap).
	RoleAdmin
)

func (r Role) String() string {
	switch r {
	case RolePublic:
		return "public"
	case RoleRead:
		return "read"
	case RoleWrite:
		return "write"
	case RoleAdmin:
		return "admin"
	}
	return fmt.Sprintf("Role(%d)", int(r))
}

// ParseRole parses "read", "write" or "admin".
func ParseRole(s string) (Role, error) {
	switch s {
	case "read":
		return RoleRead, nil
	case "write":
		return RoleWrite, nil
	case "admin":
		return RoleAdmin, nil
	}
	return 0, fmt.Errorf("api: unknown role %q (want read, write or admin)", s)
}

// Token is one accepted bearer token.
type Token struct {
	Name   string // shown in logs; never the secret
	Secret string
	Role   Role
	// ExpiresAt, if not zero, is when the token stops being accepted: from
	// then on it gets 401 token_expired (Options.Clock decides when).
	ExpiresAt time.Time
}

// CodeTokenExpired: 401, the bearer token is known but past its
// expires_at. Replace it; the response names the token and the time.
const CodeTokenExpired = "token_expired"

// TokenExpiryWarning is how long before a token's expiry New starts to
// warn about it in the log.
const TokenExpiryWarning = 7 * 24 * time.Hour

// Principal is the caller of a request.
type Principal struct {
	// Name is the token's name, or "anonymous" when auth is off.
	Name string
	// Role is the token's role (RoleAdmin when auth is off).
	Role Role
	// Authenticated is set when a bearer token was checked (Name is then
	// the token's name, which may be any string, even "anonymous").
	Authenticated bool
}

type principalKey struct{}

// PrincipalFrom returns the authenticated caller of the request in ctx.
func PrincipalFrom(ctx context.Context) (Principal, bool) {
	p, ok := ctx.Value(principalKey{}).(Principal)
	return p, ok
}

// authenticator checks bearer tokens. The secrets are compared as SHA-256
// digests in constant time, so neither their length nor their content leaks
// through timing.
// Expiry is checked against the injected clock on every request.
type authenticator struct {
	tokens []hashedToken
	clock  sched.Clock
}

type hashedToken struct {
	name    string
	digest  [32]byte
	role    Role
	expires time.Time // zero: never
}

func newAuthenticator(tokens []Token, clock sched.Clock) *authenticator {
	a := &authenticator{clock: clock}
	for _, t := range tokens {
		a.tokens = append(a.tokens, hashedToken{name: t.Name, digest: sha256.Sum256([]byte(t.Secret)), role: t.Role, expires: t.ExpiresAt})
	}
	return a
}

// warnExpiring logs a warning per token that has expired or expires
// within TokenExpiryWarning.
func (a *authenticator) warnExpiring(log *slog.Logger) {
	now := a.clock.Now()
	for _, t := range a.tokens {
		switch {
		case t.expires.IsZero():
		case !now.Before(t.expires):
			log.Warn("api token has expired: requests with it get 401 token_expired; replace it", "token", t.name,
				"expires_at", t.expires.Format(time.RFC3339))
		case t.expires.Sub(now) <= TokenExpiryWarning:
			log.Warn("api token expires soon; replace it before then", "token", t.name,
				"expires_at", t.expires.Format(time.RFC3339), "expires_in", t.expires.Sub(now).Round(time.Minute).String())
		}
	}
}

func (a *authenticator) enabled() bool { return len(a.tokens) > 0 }

// authorize returns the caller or the error to send.
func (a *authenticator) authorize(r *http.Request, need Role) (Principal, *Error) {
	if !a.enabled() {
		return Principal{Name: "anonymous", Role: RoleAdmin}, nil
	}
	if need == RolePublic {
		return Principal{Name: "anonymous", Role: RolePublic}, nil
	}
	h := r.Header.Get("Authorization")
	scheme, secret, ok := strings.Cut(h, " ")
	if h == "" {
		return Principal{}, Unauthenticated("missing bearer token: send \"Authorization: Bearer <token>\"")
	}
	if !ok || !strings.EqualFold(scheme, "Bearer") || secret == "" {
		return Principal{}, Unauthenticated("malformed Authorization header: want \"Bearer <token>\"")
	}
	d := sha256.Sum256([]byte(strings.TrimSpace(secret)))
	var found *hashedToken
	for i := range a.tokens {
		if subtle.ConstantTimeCompare(d[:], a.tokens[i].digest[:]) == 1 {
			found = &a.tokens[i]
		}
	}
	if found == nil {
		return Principal{}, Unauthenticated("unknown bearer token")
	}
	if !found.expires.IsZero() && !a.clock.Now().Before(found.expires) {
		return Principal{}, Errorf(http.StatusUnauthorized, CodeTokenExpired, "token %q expired at %s",
			found.name, found.expires.Format(time.RFC3339)).With("token", found.name).With("expires_at", found.expires.Format(time.RFC3339))
	}
	p := Principal{Name: found.name, Role: found.role, Authenticated: true}
	if p.Role < need {
		return p, PermissionDenied("token %q has role %s; this operation needs %s", p.Name, p.Role, need).
			With("role", p.Role.String()).With("required_role", need.String())
	}
	return p, nil
}

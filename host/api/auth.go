package api

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"fmt"
	"net/http"
	"strings"
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
}

// Principal is the caller of a request.
type Principal struct {
	// Name is the token's name, or "anonymous" when auth is off.
	Name string
	// Role is the token's role (RoleAdmin when auth is off).
	Role Role
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
type authenticator struct {
	tokens []hashedToken
}

type hashedToken struct {
	name   string
	digest [32]byte
	role   Role
}

func newAuthenticator(tokens []Token) *authenticator {
	a := &authenticator{}
	for _, t := range tokens {
		a.tokens = append(a.tokens, hashedToken{name: t.Name, digest: sha256.Sum256([]byte(t.Secret)), role: t.Role})
	}
	return a
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
	p := Principal{Name: found.name, Role: found.role}
	if p.Role < need {
		return p, PermissionDenied("token %q has role %s; this operation needs %s", p.Name, p.Role, need).
			With("role", p.Role.String()).With("required_role", need.String())
	}
	return p, nil
}

package sdk

import (
	"fmt"

	"github.com/hostd-dev/hostd/sdk/abi"
)

// A registered handler takes the input envelope and returns its output
// envelope (nil for ack callbacks and validators).
type handlerFunc func(in []byte) ([]byte, error)

type registration struct {
	kind abi.Kind
	name string
	role abi.Role
	fn   handlerFunc
}

// Option changes how a handler is registered (RequireRole).
type Option func(*registration)

// RequireRole declares the API role a client's token needs to broadcast
// this handler's message type: RoleAdmin for a type as dangerous as
// deleting a topic. Without it a type needs RoleWrite. When the handlers
// of one type declare different roles, the strongest applies. Policies
// take no role (a topic operation's own role applies).
//
//	sdk.OnAck("cluster.wipe", wipe, sdk.RequireRole(sdk.RoleAdmin))
func RequireRole(r abi.Role) Option { return func(rg *registration) { rg.role = r } }

// Roles a message type may require (RequireRole).
const (
	RoleWrite = abi.RoleWrite
	RoleAdmin = abi.RoleAdmin
)

// handlers is indexed by handler id (the index). Written only from init.
var handlers []registration

func register(kind abi.Kind, name string, fn handlerFunc, opts ...Option) {
	rg := registration{kind: kind, name: name, fn: fn}
	for _, o := range opts {
		o(&rg)
	}
	if rg.role != abi.RoleDefault && (kind == abi.KindPolicy || abi.RegisterKind(kind, rg.role)>>16 != 0) {
		panic(fmt.Sprintf("sdk: %s %q: a role applies to message types only, and must be RoleWrite or RoleAdmin", kind, name))
	}
	if _, _, ok := abi.SplitRegisterKind(abi.RegisterKind(kind, rg.role)); !ok {
		panic(fmt.Sprintf("sdk: %s %q: role %d must be RoleWrite or RoleAdmin", kind, name, rg.role))
	}
	if name == "" {
		panic(fmt.Sprintf("sdk: %s registered with an empty name", kind))
	}
	for _, r := range handlers {
		if r.kind == kind && r.name == name {
			panic(fmt.Sprintf("sdk: %s %q registered twice", kind, name))
		}
	}
	id := int32(len(handlers))
	handlers = append(handlers, rg)
	hostRegister(abi.RegisterKind(kind, rg.role), name, id)
}

// dispatch runs handler id on in. It turns the handler's error into a
// result code and message; a panic is reported by the caller's recover.
func dispatch(id int32, in []byte) (code abi.Code, out []byte, msg string) {
	if id < 0 || int(id) >= len(handlers) {
		return abi.CodePermanent, nil, fmt.Sprintf("sdk: no handler %d", id)
	}
	out, err := handlers[id].fn(in)
	switch {
	case err == nil:
		return abi.CodeOK, out, ""
	case IsPermanent(err):
		return abi.CodePermanent, nil, err.Error()
	default:
		return abi.CodeRetryable, nil, err.Error()
	}
}

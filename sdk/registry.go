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
	fn   handlerFunc
}

// handlers is indexed by handler id (the index). Written only from init.
var handlers []registration

func register(kind abi.Kind, name string, fn handlerFunc) {
	if name == "" {
		panic(fmt.Sprintf("sdk: %s registered with an empty name", kind))
	}
	for _, r := range handlers {
		if r.kind == kind && r.name == name {
			panic(fmt.Sprintf("sdk: %s %q registered twice", kind, name))
		}
	}
	id := int32(len(handlers))
	handlers = append(handlers, registration{kind, name, fn})
	hostRegister(kind, name, id)
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

//go:build !wasip1

package sdk

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/hostd-dev/hostd/sdk/abi"
)

// This file is the native (non-Wasm) implementation of the host services,
// for `go test`/`go vet` of plugins and for sdk/sdktest.

// Backend serves the host services in a native build. It exists for
// sdk/sdktest (an in-memory KV, config and recorded logs); plugin authors
// use sdktest instead of implementing it.
type Backend interface {
	// KVGet returns the value of key; ErrNotFound-style absence is
	// reported as ok=false. Errors should wrap the sdk sentinels
	// (ErrReadOnly, ErrQuota, ...).
	KVGet(key string) (value []byte, ok bool, err error)
	KVPut(key string, value []byte) error
	KVDelete(key string) error
	// KVScan follows the semantics of sdk.KVScan (limit already clamped).
	KVScan(prefix, after string, limit int) (entries []KV, more bool, err error)
	Config(key string) (string, bool)
	Log(level int32, msg string)
	SpanEvent(name string, attrs []abi.Attr)
	SpanAttrs(attrs []abi.Attr)
	Now() time.Time
}

var (
	backendMu sync.RWMutex
	backend   Backend
)

// SetBackend installs b as the native host services and returns the one it
// replaced (nil restores the default: KV fails with ErrNoBackend, logs go
// to slog.Default, Now is time.Now). For sdk/sdktest only.
func SetBackend(b Backend) (previous Backend) {
	backendMu.Lock()
	defer backendMu.Unlock()
	previous, backend = backend, b
	return previous
}

func current() Backend {
	backendMu.RLock()
	defer backendMu.RUnlock()
	return backend
}

// Registration is one handler registered by the plugin's init functions.
type Registration struct {
	Kind abi.Kind
	Name string
	// Role is the role declared with RequireRole (RoleDefault if none).
	Role abi.Role
}

// Registrations lists the handlers registered so far, in registration
// order. For sdk/sdktest only.
func Registrations() []Registration {
	out := make([]Registration, len(handlers))
	for i, r := range handlers {
		out[i] = Registration{r.kind, r.name, r.role}
	}
	return out
}

// ErrNoHandler is returned by Dispatch for an unregistered (kind, name).
var ErrNoHandler = errors.New("sdk: no handler registered")

// Dispatch runs the handler registered for (kind, name) on the input
// envelope exactly as the Wasm build's handle export does (same decoding,
// same result codes; a panic is recovered and reported as a permanent
// failure with its message). For sdk/sdktest only.
func Dispatch(kind abi.Kind, name string, in []byte) (code abi.Code, out []byte, msg string, err error) {
	for id, r := range handlers {
		if r.kind == kind && r.name == name {
			defer func() {
				if p := recover(); p != nil {
					code, out, msg = abi.CodePermanent, nil, fmt.Sprintf("panic: %v", p)
				}
			}()
			code, out, msg = dispatch(int32(id), in)
			return code, out, msg, nil
		}
	}
	return 0, nil, "", fmt.Errorf("%w: %s %q", ErrNoHandler, kind, name)
}

func hostRegister(int32, string, int32) {}

func hostKVGet(key string) ([]byte, bool, error) {
	if b := current(); b != nil {
		return b.KVGet(key)
	}
	return nil, false, ErrNoBackend
}

func hostKVPut(key string, value []byte) error {
	if b := current(); b != nil {
		return b.KVPut(key, value)
	}
	return ErrNoBackend
}

func hostKVDelete(key string) error {
	if b := current(); b != nil {
		return b.KVDelete(key)
	}
	return ErrNoBackend
}

func hostKVScan(prefix, after string, limit int) ([]KV, bool, error) {
	if b := current(); b != nil {
		return b.KVScan(prefix, after, limit)
	}
	return nil, false, ErrNoBackend
}

func hostConfig(key string) (string, bool) {
	if b := current(); b != nil {
		return b.Config(key)
	}
	return "", false
}

func hostNow() time.Time {
	if b := current(); b != nil {
		return b.Now()
	}
	return time.Now()
}

func hostLog(level int32, msg string) {
	if b := current(); b != nil {
		b.Log(level, msg)
		return
	}
	slog.Default().Log(context.Background(), slog.Level(level), strings.TrimSpace(msg), "plugin", "native")
}

func hostSpanEvent(name string, attrs []abi.Attr) {
	if b := current(); b != nil {
		b.SpanEvent(name, attrs)
	}
}

func hostSpanAttrs(attrs []abi.Attr) {
	if b := current(); b != nil {
		b.SpanAttrs(attrs)
	}
}

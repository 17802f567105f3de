package wasm

import (
	"errors"
	"fmt"
)

// ErrorKind classifies a failed plugin call.
type ErrorKind string

// Error kinds; PluginError.Permanent says which ones retrying cannot fix.
const (
	// KindRetryable: the handler returned an ordinary error.
	KindRetryable ErrorKind = "retryable"
	// KindPermanent: the handler returned sdk.Permanent(err).
	KindPermanent ErrorKind = "permanent"
	// KindTrap: the guest trapped (e.g. out-of-bounds memory access); the
	// instance was discarded.
	KindTrap ErrorKind = "trap"
	// KindPanic: the guest panicked or exited; the instance was discarded.
	KindPanic ErrorKind = "panic"
	// KindOOM: the guest ran out of memory (memory limit); the instance
	// was discarded.
	KindOOM ErrorKind = "oom"
	// KindTimeout: the call exceeded the plugin's call timeout; the
	// instance was discarded.
	KindTimeout ErrorKind = "timeout"
	// KindCanceled: the caller's context ended during the call.
	KindCanceled ErrorKind = "canceled"
	// KindBadOutput: the guest returned output that is too large or does
	// not decode (a plugin bug; retrying gives the same result).
	KindBadOutput ErrorKind = "bad_output"
	// KindUnavailable: no instance could be started (the plugin is backing
	// off after start failures) or the runtime is closed.
	KindUnavailable ErrorKind = "unavailable"
)

// PluginError is the error of a failed plugin call. Message is the
// guest's message (for traps: wazero's trap message; for panics: the
// panic value), never empty.
type PluginError struct {
	Plugin string
	// Handler is "ack", "validator", "resource-keys" or "policy".
	Handler string
	// Name is the message type (or the policy name).
	Name    string
	Kind    ErrorKind
	Message string
}

func (e *PluginError) Error() string {
	return fmt.Sprintf("plugin %s: %s %s: %s: %s", e.Plugin, e.Handler, e.Name, e.Kind, e.Message)
}

// Permanent reports whether retrying the same call cannot help: the
// handler said so (KindPermanent) or returned undecodable output.
// Traps, panics, OOM and timeouts are not permanent: the instance was
// replaced and a retry runs on a fresh one (the broadcast engine retries
// with backoff, and its max_attempts bounds a plugin that always crashes).
func (e *PluginError) Permanent() bool {
	return e.Kind == KindPermanent || e.Kind == KindBadOutput
}

// IsPermanent reports whether err is a *PluginError that is permanent.
func IsPermanent(err error) bool {
	var pe *PluginError
	return errors.As(err, &pe) && pe.Permanent()
}

// KindOf returns the ErrorKind of err, or "" if err is not a *PluginError.
func KindOf(err error) ErrorKind {
	var pe *PluginError
	if errors.As(err, &pe) {
		return pe.Kind
	}
	return ""
}

var (
	// ErrNoHandler: no loaded plugin registered a handler of that kind for
	// that message type (or policy name).
	ErrNoHandler = errors.New("wasm: no plugin handles this")
	// ErrClosed: the runtime has been closed.
	ErrClosed = errors.New("wasm: runtime closed")
	// ErrNotFound: no plugin by that name (operator KV reads and List).
	ErrNotFound = errors.New("wasm: plugin not found")
	// ErrUnknownPlugin: an operator's KV write names a plugin that is
	// neither loaded nor configured and has no KV (it would create an
	// orphan namespace).
	ErrUnknownPlugin = errors.New("wasm: no such plugin")
	// ErrInUse: a reload would remove a message type that pending work
	// still needs.
	ErrInUse = errors.New("wasm: message type still in use")
	// ErrInitTimeout: an instance did not start (instantiation, start
	// function, _initialize) within the plugin's init timeout; wrapped in
	// the plugin's *LoadError, or in the start error of a refill.
	ErrInitTimeout = errors.New("wasm: plugin initialization timed out")
	// ErrInvalidModule wraps every load error about a module's contents
	// (not Wasm, wrong ABI, missing or unknown functions, registration
	// conflicts).
	ErrInvalidModule = errors.New("wasm: invalid plugin module")
)

// LoadError is the error of loading one plugin file.
type LoadError struct {
	Plugin string
	Path   string
	Err    error
}

func (e *LoadError) Error() string {
	return fmt.Sprintf("plugin %s (%s): %v", e.Plugin, e.Path, e.Err)
}

func (e *LoadError) Unwrap() error { return e.Err }

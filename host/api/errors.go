package api

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"strings"
	"unicode/utf8"

	"github.com/hostd-dev/hostd/runtime/catalog"
	"github.com/hostd-dev/hostd/runtime/wal"
)

// Error codes: stable strings that clients match on. docs/api.md lists them.
// Add a code here (and to docs/api.md) rather than inventing one in a handler.
const (
	CodeInvalidArgument    = "invalid_argument"    // 400: malformed or invalid input
	CodeUnauthenticated    = "unauthenticated"     // 401: missing or unknown token
	CodePermissionDenied   = "permission_denied"   // 403: token's role is too weak
	CodeNotFound           = "not_found"           // 404: no such route or resource
	CodeMethodNotAllowed   = "method_not_allowed"  // 405
	CodeTimeout            = "timeout"             // 408/504: the request timed out
	CodeConflict           = "conflict"            // 409: state changed / already exists differently
	CodeAlreadyExists      = "already_exists"      // 409: the resource exists
	CodeFailedPrecondition = "failed_precondition" // 412: state does not allow the operation (e.g. stale fence)
	CodeTooLarge           = "too_large"           // 413: body or batch too large
	CodeUnsupportedMedia   = "unsupported_media"   // 415: not application/json
	CodeResourceExhausted  = "resource_exhausted"  // 429: a quota or limit was hit
	CodeCanceled           = "canceled"            // 499: the client went away
	CodeInternal           = "internal"            // 500: a bug or an unexpected failure (logged)
	CodeUnavailable        = "unavailable"         // 503: not ready, shutting down, or a dependency is down
	CodeOffsetOutOfRange   = "offset_out_of_range" // 416: offset below min or above max of a queue (details: min, max)
)

// Error is the one error shape of the API. A handler returns it (or any
// error wrapping it) and the server writes
//
//	{"error": {"code": "...", "message": "...", "details": {...}}}
//
// with Status as the HTTP status. Other errors go through the server's error
// mappers (Server.MapErrors) and otherwise become 500 "internal" (logged,
// message hidden from the client).
type Error struct {
	Status  int            `json:"-"`
	Code    string         `json:"code"`
	Message string         `json:"message"`
	Details map[string]any `json:"details,omitempty"`
	// Err is the underlying cause, logged but never sent to the client.
	Err error `json:"-"`
}

func (e *Error) Error() string {
	if e.Err != nil {
		return fmt.Sprintf("%s: %s: %v", e.Code, e.Message, e.Err)
	}
	return e.Code + ": " + e.Message
}

// Unwrap returns the cause.
func (e *Error) Unwrap() error { return e.Err }

// With returns a copy of e with one more detail.
func (e *Error) With(key string, value any) *Error {
	c := *e
	c.Details = make(map[string]any, len(e.Details)+1)
	for k, v := range e.Details {
		c.Details[k] = v
	}
	c.Details[key] = value
	return &c
}

// Wrap returns a copy of e with cause err (for logs).
func (e *Error) Wrap(err error) *Error {
	c := *e
	c.Err = err
	return &c
}

// Errorf builds an Error.
func Errorf(status int, code, format string, args ...any) *Error {
	return &Error{Status: status, Code: code, Message: fmt.Sprintf(format, args...)}
}

// BadRequest is 400 invalid_argument.
func BadRequest(format string, args ...any) *Error {
	return Errorf(http.StatusBadRequest, CodeInvalidArgument, format, args...)
}

// InvalidField is 400 invalid_argument naming the offending field in
// details.field. Every invalid_argument names a field: WriteError puts
// "request" there when a handler did not (see invalidFrom).
func InvalidField(field, format string, args ...any) *Error {
	return BadRequest(format, args...).With("field", field)
}

// NotFound is 404 not_found.
func NotFound(format string, args ...any) *Error {
	return Errorf(http.StatusNotFound, CodeNotFound, format, args...)
}

// Conflict is 409 conflict.
func Conflict(format string, args ...any) *Error {
	return Errorf(http.StatusConflict, CodeConflict, format, args...)
}

// AlreadyExists is 409 already_exists.
func AlreadyExists(format string, args ...any) *Error {
	return Errorf(http.StatusConflict, CodeAlreadyExists, format, args...)
}

// FailedPrecondition is 412 failed_precondition.
func FailedPrecondition(format string, args ...any) *Error {
	return Errorf(http.StatusPreconditionFailed, CodeFailedPrecondition, format, args...)
}

// TooLarge is 413 too_large.
func TooLarge(format string, args ...any) *Error {
	return Errorf(http.StatusRequestEntityTooLarge, CodeTooLarge, format, args...)
}

// ResourceExhausted is 429 resource_exhausted.
func ResourceExhausted(format string, args ...any) *Error {
	return Errorf(http.StatusTooManyRequests, CodeResourceExhausted, format, args...)
}

// Unauthenticated is 401 unauthenticated.
func Unauthenticated(format string, args ...any) *Error {
	return Errorf(http.StatusUnauthorized, CodeUnauthenticated, format, args...)
}

// PermissionDenied is 403 permission_denied.
func PermissionDenied(format string, args ...any) *Error {
	return Errorf(http.StatusForbidden, CodePermissionDenied, format, args...)
}

// Unavailable is 503 unavailable.
func Unavailable(format string, args ...any) *Error {
	return Errorf(http.StatusServiceUnavailable, CodeUnavailable, format, args...)
}

// Internal is 500 internal; cause is logged, not sent.
func Internal(cause error) *Error {
	return &Error{Status: http.StatusInternalServerError, Code: CodeInternal,
		Message: "internal error; see the hostd log", Err: cause}
}

// ErrorMapper turns a feature's errors into API errors; it returns nil for
// errors it does not know. Register with Server.MapErrors.
type ErrorMapper func(err error) *Error

// toAPIError resolves err to the Error sent to the client.
func (s *Server) toAPIError(err error) *Error {
	var ae *Error
	if errors.As(err, &ae) {
		return ae
	}
	s.mu.RLock()
	mappers := s.mappers
	s.mu.RUnlock()
	for _, m := range mappers {
		if ae := m(err); ae != nil {
			if ae.Err == nil {
				ae = ae.Wrap(err)
			}
			return ae
		}
	}
	switch {
	case errors.Is(err, catalog.ErrFenced):
		// Cluster mode: the leader term this request ran in ended and
		// nothing of it was committed. The next leader serves the retry.
		return Unavailable("this replica stopped leading while serving the request; nothing was committed, retry").
			With("reason", "fenced").Wrap(err)
	case errors.Is(err, catalog.ErrUnavailable):
		// etcd is electing a leader, has lost quorum or cannot be
		// reached: it passes. A write may or may not have been applied;
		// its retry with the same idempotency key is safe.
		return Unavailable("the catalog is unavailable (etcd: no leader, no quorum or unreachable); retry with the same idempotency key").
			With("reason", "catalog_unavailable").Wrap(err)
	case errors.Is(err, wal.ErrUnavailable):
		return Unavailable("the physical queues are unavailable (JetStream: no quorum or stream leader, or unreachable); retry with the same idempotency key").
			With("reason", "queues_unavailable").Wrap(err)
	case errors.Is(err, context.DeadlineExceeded):
		return Errorf(http.StatusGatewayTimeout, CodeTimeout, "the request did not finish within its timeout").Wrap(err)
	case errors.Is(err, context.Canceled):
		return Errorf(499, CodeCanceled, "the request was canceled").Wrap(err)
	}
	return Internal(err)
}

// fieldRule maps a marker in a feature's validation message to the
// request field it is about (see invalidFrom).
type fieldRule struct{ marker, field string }

var indexedKey = regexp.MustCompile(`(resource key|key) #(\d+)`)

// invalidFrom is 400 invalid_argument for a feature's validation error
// (wrapped as the cause), naming in details.field the field of the first
// rule whose marker the message contains; a "key #N" in the message
// becomes indexed+"[N]". Without a match the field is "request".
func invalidFrom(err error, indexed string, rules ...fieldRule) *Error {
	msg := err.Error()
	field := "request"
	if m := indexedKey.FindStringSubmatch(msg); m != nil && indexed != "" {
		field = indexed + "[" + m[2] + "]"
	} else {
		for _, r := range rules {
			if strings.Contains(msg, r.marker) {
				field = r.field
				break
			}
		}
	}
	return InvalidField(field, "%s", msg).Wrap(err)
}

// Limits on what an error response echoes back, so that a 1 MiB key does
// not come back as a 1 MiB error: the message is cut to MaxErrorMessage
// bytes and every string detail to MaxErrorDetail bytes, each ending in
// TruncatedMark when cut.
const (
	MaxErrorMessage = 1024
	MaxErrorDetail  = 256
	TruncatedMark   = "…(truncated)"
)

// truncate cuts s to at most max bytes (at a rune boundary), ending in
// TruncatedMark when it was cut.
func truncate(s string, max int) string {
	if len(s) <= max {
		return s
	}
	n := max - len(TruncatedMark)
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + TruncatedMark
}

// capped returns e as sent to a client: message and string details
// truncated (see MaxErrorMessage), and details.field set on an
// invalid_argument that lacks it. e itself is not changed.
func capped(e *Error) *Error {
	c := *e
	c.Message = truncate(e.Message, MaxErrorMessage)
	if len(e.Details) > 0 || e.Code == CodeInvalidArgument {
		c.Details = make(map[string]any, len(e.Details)+1)
		for k, v := range e.Details {
			switch v := v.(type) {
			case string:
				c.Details[k] = truncate(v, MaxErrorDetail)
			case []string:
				out := make([]string, len(v))
				for i, s := range v {
					out[i] = truncate(s, MaxErrorDetail)
				}
				c.Details[k] = out
			default:
				c.Details[k] = v
			}
		}
		if _, ok := c.Details["field"]; !ok && e.Code == CodeInvalidArgument {
			c.Details["field"] = "request"
		}
	}
	return &c
}

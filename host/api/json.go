package api

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strconv"
	"strings"

	"github.com/hostd-dev/hostd/wire"
)

// DecodeJSON reads the request body as one JSON value into v. It rejects
// unknown fields, trailing data, an empty body, a non-JSON content type and
// a body over the server's size limit, each as an *Error naming the problem.
// A string (value or object key) that is not valid UTF-8 is 400
// invalid_argument naming it in details.field (see invalidJSONString): it
// is refused, never replaced by U+FFFD.
func DecodeJSON(r *http.Request, v any) error {
	if ct := r.Header.Get("Content-Type"); ct != "" {
		mt, _, err := mime.ParseMediaType(ct)
		if err != nil || (mt != "application/json" && !strings.HasSuffix(mt, "+json")) {
			return Errorf(http.StatusUnsupportedMediaType, CodeUnsupportedMedia,
				"Content-Type must be application/json, got %q", ct)
		}
	}
	body, err := io.ReadAll(r.Body)
	if err != nil {
		return jsonError(err)
	}
	if field, key, bad := invalidJSONString(body); bad {
		if key {
			return InvalidField(field, "an object key in %s is not valid UTF-8 (invalid bytes or a lone \\u surrogate escape)", field)
		}
		return InvalidField(field, "%s is not valid UTF-8 (invalid bytes or a lone \\u surrogate escape)", field)
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return jsonError(err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		if err != nil {
			return jsonError(err)
		}
		return InvalidField("body", "request body must hold exactly one JSON value")
	}
	return nil
}

func jsonError(err error) *Error {
	var (
		maxErr    *http.MaxBytesError
		syntaxErr *json.SyntaxError
		typeErr   *json.UnmarshalTypeError
	)
	switch {
	case errors.As(err, &maxErr):
		return TooLarge("request body exceeds %d bytes", maxErr.Limit).With("limit_bytes", maxErr.Limit)
	case errors.Is(err, io.EOF):
		return InvalidField("body", "request body is empty; a JSON object is required")
	case errors.Is(err, io.ErrUnexpectedEOF):
		return InvalidField("body", "request body is truncated JSON")
	case errors.As(err, &syntaxErr):
		return InvalidField("body", "request body is not valid JSON at byte %d: %v", syntaxErr.Offset, syntaxErr).
			With("offset", syntaxErr.Offset)
	case errors.As(err, &typeErr):
		field := typeErr.Field
		if field == "" {
			return InvalidField("body", "request body must be a JSON %s, got %s", typeName(typeErr), typeErr.Value)
		}
		return InvalidField(field, "field %q must be %s, got %s", field, typeName(typeErr), typeErr.Value)
	}
	if f, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
		f = strings.Trim(f, `"`)
		return InvalidField(f, "unknown field %q", f)
	}
	return InvalidField("body", "invalid request body: %v", err)
}

func typeName(e *json.UnmarshalTypeError) string {
	if e.Type == nil {
		return "value"
	}
	switch e.Type.Kind().String() {
	case "struct", "map":
		return "an object"
	case "slice", "array":
		return "an array"
	case "string":
		return "a string"
	case "bool":
		return "a boolean"
	}
	return "a " + e.Type.String()
}

// WriteJSON writes v as JSON with the given status.
func WriteJSON(w http.ResponseWriter, status int, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("api: encode response: %w", err)
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(b)+1))
	w.WriteHeader(status)
	_, err = w.Write(append(b, '\n'))
	return err
}

// WriteError writes err in the API's error shape. Handlers normally return
// errors instead; this is for code outside a HandlerFunc. The message and
// string details are capped (MaxErrorMessage, MaxErrorDetail) so that no
// input is echoed back whole, and an invalid_argument always names
// details.field ("request" when the handler named none).
func WriteError(w http.ResponseWriter, e *Error) {
	status := e.Status
	if status == 0 {
		status = http.StatusInternalServerError
	}
	if status == http.StatusUnauthorized {
		w.Header().Set("WWW-Authenticate", `Bearer realm="hostd"`)
	}
	// 503 is always temporary here (starting, shutting down, no leader,
	// a leader term just ended): tell clients when to try again.
	if status == http.StatusServiceUnavailable && w.Header().Get("Retry-After") == "" {
		w.Header().Set("Retry-After", "1")
	}
	c := capped(e)
	_ = WriteJSON(w, status, wire.ErrorResponse{Error: &wire.Error{Code: c.Code, Message: c.Message, Details: c.Details}})
}

// Pagination limits.
const (
	DefaultPageLimit = 100
	MaxPageLimit     = 1000
)

// Page is a list request's pagination: query parameters limit (default
// 100, 1..1000) and page_token (opaque, from a previous next_page_token).
type Page struct {
	Limit int
	Token string
}

// PageParams reads limit and page_token from the query.
func PageParams(r *http.Request) (Page, error) {
	q := r.URL.Query()
	p := Page{Limit: DefaultPageLimit, Token: q.Get("page_token")}
	if s := q.Get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > MaxPageLimit {
			return p, InvalidField("limit", "limit must be an integer in [1, %d], got %q", MaxPageLimit, s)
		}
		p.Limit = n
	}
	return p, nil
}

// List is the response of every list endpoint. Items is never null;
// NextPageToken is empty on the last page.
type List[T any] = wire.List[T]

// WriteList writes a page of items (200).
func WriteList[T any](w http.ResponseWriter, items []T, next string) error {
	if items == nil {
		items = []T{}
	}
	return WriteJSON(w, http.StatusOK, List[T]{Items: items, NextPageToken: next})
}

// EncodePageToken makes an opaque page token from a resume position (e.g.
// the last key returned).
func EncodePageToken(pos []byte) string {
	if len(pos) == 0 {
		return ""
	}
	return base64.RawURLEncoding.EncodeToString(pos)
}

// DecodePageToken reverses EncodePageToken; a garbled token is a 400
// naming page_token.
func DecodePageToken(tok string) ([]byte, error) {
	if tok == "" {
		return nil, nil
	}
	b, err := base64.RawURLEncoding.DecodeString(tok)
	if err != nil || len(b) == 0 {
		return nil, InvalidField("page_token", "page_token is not a token returned by this API")
	}
	return b, nil
}

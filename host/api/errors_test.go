package api

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/hostd-dev/hostd/builtin/broadcast"
	"github.com/hostd-dev/hostd/builtin/locks"
	"github.com/hostd-dev/hostd/builtin/mapping"
	"github.com/hostd-dev/hostd/runtime/wal"
)

// An error response never echoes a huge input whole: a 1 MiB key gives a
// message of at most 1 KiB and string details of at most 256 B, each
// marked as truncated; short values are untouched; every invalid_argument
// names details.field.
func TestErrorResponseCapped(t *testing.T) {
	huge := strings.Repeat("k", 1<<20)
	s := start(t, Options{MaxBodyBytes: 4 << 20}, func(s *Server) {
		s.Handle("POST /v1/things", RoleWrite, func(w http.ResponseWriter, r *http.Request) error {
			var body struct {
				Key string `json:"key"`
			}
			if err := DecodeJSON(r, &body); err != nil {
				return err
			}
			if len(body.Key) > 10 {
				return InvalidField("key", "key %q is too long", body.Key).With("key", body.Key).
					With("keys", []string{body.Key, "short"})
			}
			return BadRequest("key %q is wrong", body.Key) // no field: the server adds one
		})
	})
	r := do(t, s, "POST", "/v1/things", "", `{"key":"`+huge+`"}`)
	if r.Status != 400 || len(r.Raw) > 4096 {
		t.Fatalf("status %d, %d-byte response for a 1 MiB key", r.Status, len(r.Raw))
	}
	e := r.Body["error"].(map[string]any)
	d := e["details"].(map[string]any)
	msg, key := e["message"].(string), d["key"].(string)
	keys := d["keys"].([]any)
	if len(msg) > MaxErrorMessage || !strings.HasSuffix(msg, TruncatedMark) || !strings.HasPrefix(msg, `key "kkk`) {
		t.Errorf("message %d bytes: %.60q…", len(msg), msg)
	}
	if len(key) > MaxErrorDetail || !strings.HasSuffix(key, TruncatedMark) || keys[0].(string) != key || keys[1] != "short" {
		t.Errorf("details: key %d bytes %.40q, keys %v", len(key), key, len(keys))
	}
	if d["field"] != "key" {
		t.Errorf("field %v", d["field"])
	}
	r = do(t, s, "POST", "/v1/things", "", `{"key":"x"}`)
	if e := r.Body["error"].(map[string]any); e["message"] != `key "x" is wrong` || e["details"].(map[string]any)["field"] != "request" {
		t.Errorf("short error: %s", r.Raw)
	}
	// Body-level decode errors name the body.
	r = do(t, s, "POST", "/v1/things", "", `{"key":`)
	if r.Body["error"].(map[string]any)["details"].(map[string]any)["field"] != "body" {
		t.Errorf("truncated body: %s", r.Raw)
	}
}

func TestTruncateKeepsUTF8(t *testing.T) {
	for n := MaxErrorDetail - 8; n < MaxErrorDetail+8; n++ {
		s := strings.Repeat("é", n)
		got := truncate(s, MaxErrorDetail)
		if len(got) > MaxErrorDetail || !utf8.ValidString(got) || (len(s) > MaxErrorDetail) != strings.HasSuffix(got, TruncatedMark) {
			t.Fatalf("n=%d: %d bytes, valid=%v", n, len(got), utf8.ValidString(got))
		}
	}
}

// The builtins' validation errors become invalid_argument naming the
// request field they are about.
func TestFeatureInvalidArgumentNamesField(t *testing.T) {
	bc := func(msg string) error { return fmt.Errorf("%w: %s", broadcast.ErrInvalidRequest, msg) }
	lk := func(msg string) error { return fmt.Errorf("%w: %s", locks.ErrInvalid, msg) }
	cases := []struct {
		err   error
		m     func(error) *Error
		field string
	}{
		{bc("message type is empty"), broadcastError, "type"},
		{bc("message type longer than 256 bytes"), broadcastError, "type"},
		{bc(`property "hostd.broadcast.id" is reserved`), broadcastError, "properties"},
		{bc("database scope needs an id"), broadcastError, "scope"},
		{bc(`wait must be done, appended or persisted (got "x")`), broadcastError, "wait"},
		{bc("resource key #3 too long"), broadcastError, "resource_keys[3]"},
		{bc("empty vchannel name"), broadcastError, "vchannels"},
		{bc("70 vchannels, max 64"), broadcastError, "vchannels"},
		{lk("owner is required"), lockError, "owner"},
		{lk("meta larger than 4096 bytes"), lockError, "meta"},
		{lk("ttl 1ns is below 1ms"), lockError, "ttl"},
		{lk("negative wait -1s"), lockError, "wait"},
		{lk(`idempotency key "owner-ttl" was used for other keys (grant g1)`), lockError, "idempotency_key"},
		{lk("a reason is required"), lockError, "reason"},
		{fmt.Errorf("%w: limit must be > 0", mapping.ErrInvalid), mappingError, "limit"},
		{fmt.Errorf("%w: retention max_age must be >= 0", mapping.ErrInvalid), mappingError, "retention.max_age"},
		{fmt.Errorf("%w: empty batch", wal.ErrInvalid), mappingError, "records"},
		{fmt.Errorf("%w: something new", wal.ErrInvalid), mappingError, "request"},
	}
	for _, c := range cases {
		ae := c.m(c.err)
		if ae == nil || ae.Code != CodeInvalidArgument || ae.Details["field"] != c.field || !errors.Is(ae, c.err) {
			t.Errorf("%v: got %+v, want invalid_argument field %q", c.err, ae, c.field)
		}
	}
}

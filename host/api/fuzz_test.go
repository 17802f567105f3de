package api

import (
	"bytes"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"
)

// FuzzDecodeJSON: any request body either decodes or yields a 4xx *Error;
// never a panic or a 5xx.
func FuzzDecodeJSON(f *testing.F) {
	for _, s := range []string{`{"name":"a","count":1}`, ``, `{`, `[]`, `{"x":1}`, `{"name":"a"} x`, `null`, `{"count":1e999}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		rec := httptest.NewRecorder()
		r := httptest.NewRequest(http.MethodPost, "/v1/items", bytes.NewReader(body))
		r.Body = http.MaxBytesReader(rec, r.Body, 1<<10)
		var it item
		err := DecodeJSON(r, &it)
		if err == nil {
			return
		}
		var ae *Error
		if !errors.As(err, &ae) || ae.Status < 400 || ae.Status > 499 || ae.Code == "" || ae.Message == "" {
			t.Fatalf("body %q: error %T %v is not a 4xx *Error", body, err, err)
		}
	})
}

// FuzzPageToken: DecodePageToken never panics and round-trips.
func FuzzPageToken(f *testing.F) {
	f.Add([]byte("topic/0"))
	f.Add([]byte{0, 255})
	f.Fuzz(func(t *testing.T, pos []byte) {
		got, err := DecodePageToken(EncodePageToken(pos))
		if err != nil || !bytes.Equal(got, pos) && len(pos) > 0 {
			t.Fatalf("round trip %q: %q %v", pos, got, err)
		}
		_, _ = DecodePageToken(string(pos))
	})
}

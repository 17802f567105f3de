package api

import (
	"bytes"
	"net/http/httptest"
	"testing"
)

// FuzzBroadcastRequest: any body either decodes into a request the engine
// can check or is an *Error; never a panic.
func FuzzBroadcastRequest(f *testing.F) {
	f.Add([]byte(`{"type":"noop","vchannels":["a/0"],"resource_keys":[{"domain":"collection","key":"x","mode":"exclusive"}],"idempotency_key":"k","scope":{"kind":"database","id":"1"},"wait":"appended","timeout":"1s"}`))
	f.Add([]byte(`{"type":"noop","payload":"aGVsbG8=","payload_text":"x"}`))
	f.Add([]byte(`{"type":"","resource_keys":[{"mode":"both"}]}`))
	f.Add([]byte(`{"type":"noop","ack_sync_up":true,"properties":{"a":"b"}}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		r := httptest.NewRequest("POST", "/v1/broadcasts", bytes.NewReader(body))
		var req BroadcastRequest
		if err := DecodeJSON(r, &req); err != nil {
			if _, ok := err.(*Error); !ok {
				t.Fatalf("decode error is not an *Error: %T %v", err, err)
			}
			return
		}
		out, err := broadcastRequest(&req)
		if err != nil {
			if _, ok := err.(*Error); !ok {
				t.Fatalf("broadcastRequest error is not an *Error: %T %v", err, err)
			}
			return
		}
		if out.Message.Type == "" {
			t.Fatal("accepted a request without a type")
		}
		for _, k := range out.ResourceKeys {
			if k.Domain == "" || k.Key == "" {
				t.Fatalf("accepted an empty resource key: %+v", k)
			}
		}
	})
}

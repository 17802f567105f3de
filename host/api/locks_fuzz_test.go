package api

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/hostd-dev/hostd/builtin/locks"
	"github.com/hostd-dev/hostd/runtime/catalog"
)

// FuzzLockRoutes sends arbitrary bodies to every lock and presence route
// of a server backed by the real lease service: the answer is 2xx or a 4xx
// in the error shape, never a 5xx or a panic, and never contains a token
// other than in the acquirer's own 200 answer.
func FuzzLockRoutes(f *testing.F) {
	db, err := catalog.Open(func() catalog.Options {
		o := catalog.DefaultOptions(f.TempDir())
		o.SyncWrites = false
		o.GCInterval = 0
		return o
	}())
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { db.Close() })
	svc, err := locks.Open(context.Background(), locks.Options{Store: db})
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { svc.Close() })
	pres := locks.NewPresence(locks.PresenceOptions{})
	f.Cleanup(pres.Close)
	s, err := New(Options{Listen: "127.0.0.1:0"})
	if err != nil {
		f.Fatal(err)
	}
	RegisterLocks(s, svc, pres)
	routes := []string{"/v1/locks", "/v1/locks/1/renew", "/v1/locks/1/release", "/v1/locks/check-fence", "/v1/locks/force-release", "/v1/presence", "/v1/presence/withdraw"}
	f.Add(uint8(0), []byte(`{"keys":[{"domain":"d","key":"k"}],"owner":"o","ttl":"1s"}`))
	f.Add(uint8(0), []byte(`{"keys":[{"domain":"d","key":"k","mode":"shared"}],"owner":"o","wait":"1ms","meta":{"a":"b"}}`))
	f.Add(uint8(0), []byte(`{"keys":[{"domain":"","key":"k"}],"owner":"o","ttl":"-1s"}`))
	f.Add(uint8(1), []byte(`{"token":"x","ttl":"99h"}`))
	f.Add(uint8(2), []byte(`{"token":""}`))
	f.Add(uint8(3), []byte(`{"domain":"d","key":"k","fence":18446744073709551615}`))
	f.Add(uint8(4), []byte(`{"domain":"d","key":"k","reason":"r"}`))
	f.Add(uint8(5), []byte(`{"key":"k","holder":"h","ttl":"1s"}`))
	f.Add(uint8(6), []byte(`{"key":"k","holder":"h","token":"t"}`))
	f.Fuzz(func(t *testing.T, route uint8, body []byte) {
		path := routes[int(route)%len(routes)]
		rec := httptest.NewRecorder()
		r := httptest.NewRequest(http.MethodPost, path, bytes.NewReader(body))
		r.Header.Set("Content-Type", "application/json")
		s.ServeHTTP(rec, r)
		if rec.Code >= 500 {
			t.Fatalf("POST %s %q: %d %s", path, body, rec.Code, rec.Body)
		}
		if rec.Code >= 400 {
			var env struct {
				Error *Error `json:"error"`
			}
			if err := json.Unmarshal(rec.Body.Bytes(), &env); err != nil || env.Error == nil || env.Error.Code == "" {
				t.Fatalf("POST %s %q: %d answer not in the error shape: %s", path, body, rec.Code, rec.Body)
			}
		}
		if rec.Code == 200 && path == "/v1/locks" {
			// Free what was taken so later inputs start from a clean table.
			var g LockGrant
			if err := json.Unmarshal(rec.Body.Bytes(), &g); err != nil || g.Token == "" {
				t.Fatalf("acquire answer %s", rec.Body)
			}
			if err := svc.Release(context.Background(), g.ID, g.Token); err != nil {
				t.Fatal(err)
			}
		}
	})
}

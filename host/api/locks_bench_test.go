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

// BenchmarkLockPairHandler is the CPU and allocations of one acquire +
// release pair through the API's handlers (no network, no fsync): the
// per-request cost that bench/locks' HTTP figure is bounded by when the
// machine is busy. Run with -benchmem.
func BenchmarkLockPairHandler(b *testing.B) {
	o := catalog.DefaultOptions(b.TempDir())
	o.SyncWrites, o.GCInterval = false, 0
	db, err := catalog.Open(o)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { db.Close() })
	svc, err := locks.Open(context.Background(), locks.Options{Store: db})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { svc.Close() })
	s, err := New(Options{Listen: "127.0.0.1:0"})
	if err != nil {
		b.Fatal(err)
	}
	RegisterLocks(s, svc, nil)
	acquire := []byte(`{"keys":[{"domain":"bench","key":"k1"}],"owner":"bench","ttl":"30s"}`)
	b.ReportAllocs()
	for b.Loop() {
		rec := httptest.NewRecorder()
		r := httptest.NewRequest(http.MethodPost, "/v1/locks", bytes.NewReader(acquire))
		r.Header.Set("Content-Type", "application/json")
		s.ServeHTTP(rec, r)
		var g LockGrant
		if rec.Code != http.StatusOK || json.Unmarshal(rec.Body.Bytes(), &g) != nil {
			b.Fatalf("acquire: %d %s", rec.Code, rec.Body)
		}
		rec = httptest.NewRecorder()
		r = httptest.NewRequest(http.MethodPost, "/v1/locks/"+g.ID+"/release", bytes.NewReader([]byte(`{"token":"`+g.Token+`"}`)))
		r.Header.Set("Content-Type", "application/json")
		s.ServeHTTP(rec, r)
		if rec.Code != http.StatusOK {
			b.Fatalf("release: %d %s", rec.Code, rec.Body)
		}
	}
}

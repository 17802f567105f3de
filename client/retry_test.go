package client

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

// flaky answers 503 (Retry-After 0) to the first `fail` requests, then
// 200, and records each request's idempotency key.
type flaky struct {
	mu   sync.Mutex
	fail int
	keys []string
}

func (f *flaky) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var body struct {
		Key string `json:"idempotency_key"`
	}
	_ = json.NewDecoder(r.Body).Decode(&body)
	f.mu.Lock()
	f.keys = append(f.keys, body.Key)
	n := len(f.keys)
	f.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	if n <= f.fail {
		w.Header().Set("Retry-After", "0")
		w.WriteHeader(http.StatusServiceUnavailable)
		_, _ = w.Write([]byte(`{"error":{"code":"unavailable","message":"no leader"}}`))
		return
	}
	if strings.HasPrefix(r.URL.Path, "/v1/locks") {
		_, _ = w.Write([]byte(`{"id":"l1"}`))
		return
	}
	_, _ = w.Write([]byte(`{"id":7}`))
}

func (f *flaky) seen() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.keys...)
}

// A submit without a key gets one per call, and its retries after 503
// carry that same key, so the daemon answers them with the original.
func TestSubmitRetriesWithOneAutoKey(t *testing.T) {
	f := &flaky{fail: 2}
	srv := httptest.NewServer(f)
	defer srv.Close()
	c, _ := New(srv.URL)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := c.SubmitBroadcast(ctx, &BroadcastRequest{Type: "noop"}); err != nil {
		t.Fatal(err)
	}
	keys := f.seen()
	if len(keys) != 3 || !strings.HasPrefix(keys[0], "auto-") || keys[0] != keys[1] || keys[1] != keys[2] {
		t.Fatalf("want 3 tries with one auto key, got %q", keys)
	}
	// The next call is another invocation: another key.
	if _, err := c.SubmitBroadcast(ctx, &BroadcastRequest{Type: "noop"}); err != nil {
		t.Fatal(err)
	}
	if k := f.seen()[3]; k == keys[0] || !strings.HasPrefix(k, "auto-") {
		t.Fatalf("second call reused key %q", k)
	}
	if _, err := c.AcquireLock(ctx, AcquireLock{Owner: "o"}); err != nil {
		t.Fatal(err)
	}
	if k := f.seen()[4]; !strings.HasPrefix(k, "auto-") {
		t.Fatalf("acquire without a key: %q", k)
	}
}

// Without a key a write is sent once: a lost answer could hide a write
// that was done, and a blind retry would do it twice.
func TestNoKeyNoRetry(t *testing.T) {
	f := &flaky{fail: 1}
	srv := httptest.NewServer(f)
	defer srv.Close()
	c, _ := New(srv.URL, WithoutAutoIdempotencyKey())
	_, err := c.SubmitBroadcast(context.Background(), &BroadcastRequest{Type: "noop"})
	if !HasCode(err, "unavailable") {
		t.Fatalf("want the 503, got %v", err)
	}
	if keys := f.seen(); len(keys) != 1 || keys[0] != "" {
		t.Fatalf("want one try without a key, got %q", keys)
	}
	// Plain Do of a POST is never retried either.
	f2 := &flaky{fail: 1}
	srv2 := httptest.NewServer(f2)
	defer srv2.Close()
	c2, _ := New(srv2.URL)
	if err := c2.Do(context.Background(), "POST", "/v1/topics", map[string]string{}, nil); !HasCode(err, "unavailable") {
		t.Fatalf("POST via Do: %v", err)
	}
	if n := len(f2.seen()); n != 1 {
		t.Fatalf("POST via Do tried %d times", n)
	}
}

// Retries stop at WithRetries and at the context's end.
func TestRetriesBounded(t *testing.T) {
	f := &flaky{fail: 100}
	srv := httptest.NewServer(f)
	defer srv.Close()
	c, _ := New(srv.URL, WithRetries(3))
	if _, err := c.SubmitBroadcast(context.Background(), &BroadcastRequest{Type: "noop"}); !HasCode(err, "unavailable") {
		t.Fatalf("want unavailable after 3 tries, got %v", err)
	}
	if n := len(f.seen()); n != 3 {
		t.Fatalf("tried %d times, want 3", n)
	}
	// A daemon that is not there at all: retried, then the error.
	dead := httptest.NewServer(http.NotFoundHandler())
	addr := dead.URL
	dead.Close()
	c2, _ := New(addr, WithRetries(2))
	start := time.Now()
	if err := c2.Do(context.Background(), "GET", "/v1/version", nil, nil); err == nil {
		t.Fatal("no error from a closed port")
	}
	if d := time.Since(start); d < 200*time.Millisecond {
		t.Fatalf("no pause before the retry (%s)", d)
	}
}

package api

import (
	"fmt"
	"net/http"
	"testing"

	"github.com/hostd-dev/hostd/runtime/catalog"
)

// A cluster replica's front server: its own routes are served (with auth),
// everything else goes to the Fallback untouched — no auth check here (the
// leader term's API checks the caller's token itself), no 404.
func TestFallbackTakesUnroutedRequests(t *testing.T) {
	var got []string
	fb := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got = append(got, r.Method+" "+r.URL.Path+" "+r.Header.Get("Authorization"))
		w.WriteHeader(http.StatusTeapot)
	})
	// (No spec check: the fallback here answers 418 on purpose.)
	noSpec := func(h http.Handler) http.Handler { return h }
	s := start(t, Options{Tokens: tokens(), Fallback: fb, Wrap: noSpec}, func(s *Server) {
		s.Handle("GET /v1/cluster", RoleRead, func(w http.ResponseWriter, r *http.Request) error {
			return WriteJSON(w, 200, map[string]string{"ok": "yes"})
		})
	})
	if r := do(t, s, "GET", "/v1/cluster", "", ""); r.Status != 401 {
		t.Fatalf("own route without token: %d %s", r.Status, r.Raw)
	}
	if r := do(t, s, "GET", "/v1/cluster", readTok, ""); r.Status != 200 {
		t.Fatalf("own route: %d %s", r.Status, r.Raw)
	}
	if r := do(t, s, "POST", "/v1/broadcasts", "", "{}"); r.Status != http.StatusTeapot {
		t.Fatalf("unrouted without token: %d %s (want the fallback's answer)", r.Status, r.Raw)
	}
	if r := do(t, s, "GET", "/v1/locks/x", writeTok, ""); r.Status != http.StatusTeapot {
		t.Fatalf("unrouted: %d %s", r.Status, r.Raw)
	}
	want := []string{"POST /v1/broadcasts ", "GET /v1/locks/x Bearer " + writeTok}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("fallback saw %q, want %q", got, want)
	}
}

// A fenced commit (the replica's leader term ended mid-request) is a
// retryable 503 with Retry-After, never a 500.
func TestFencedIsUnavailableWithRetryAfter(t *testing.T) {
	s := start(t, Options{}, func(s *Server) {
		s.Handle("POST /v1/fenced", RoleWrite, func(w http.ResponseWriter, r *http.Request) error {
			return fmt.Errorf("commit task: %w", catalog.ErrFenced)
		})
	})
	r := do(t, s, "POST", "/v1/fenced", "", "")
	if r.Status != 503 || errCode(r) != CodeUnavailable {
		t.Fatalf("fenced: %d %s", r.Status, r.Raw)
	}
	if r.Header.Get("Retry-After") == "" {
		t.Fatalf("503 without Retry-After: %v", r.Header)
	}
}

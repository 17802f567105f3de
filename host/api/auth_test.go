package api

import (
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/hostd-dev/hostd/internal/syncbuf"
	"github.com/hostd-dev/hostd/runtime/sched"
)

// Tokens with expires_at, checked against the injected clock: accepted
// until the instant of expiry, then 401 token_expired (distinct from an
// unknown token's unauthenticated) naming the token and the time; tokens
// without an expiry are unaffected. New warns once per token that has
// expired or expires within 7 days, and not about the others.
func TestTokenExpiry(t *testing.T) {
	t0 := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	clock := sched.NewFakeClock(t0)
	const (
		soonTok    = "soon-token-0123456789"
		laterTok   = "later-token-0123456789"
		expiredTok = "expired-token-0123456789"
	)
	logs := &syncbuf.Buffer{}
	s := start(t, Options{
		Clock:  clock,
		Logger: slog.New(slog.NewTextHandler(logs, nil)),
		Tokens: []Token{
			{Name: "never", Secret: readTok, Role: RoleRead},
			{Name: "soon", Secret: soonTok, Role: RoleRead, ExpiresAt: t0.Add(time.Hour)},
			{Name: "later", Secret: laterTok, Role: RoleRead, ExpiresAt: t0.Add(30 * 24 * time.Hour)},
			{Name: "expired", Secret: expiredTok, Role: RoleRead, ExpiresAt: t0.Add(-time.Minute)},
		},
	}, func(s *Server) {
		s.Handle("GET /v1/thing", RoleRead, func(w http.ResponseWriter, r *http.Request) error {
			return WriteJSON(w, 200, map[string]string{})
		})
	})

	// Start-up warnings: one for "soon", one for "expired", none else.
	var warned []string
	for _, line := range strings.Split(logs.String(), "\n") {
		if strings.Contains(line, "level=WARN") && strings.Contains(line, "api token") {
			warned = append(warned, line)
		}
	}
	if len(warned) != 2 || !strings.Contains(warned[0]+warned[1], "token=soon") || !strings.Contains(warned[0]+warned[1], "token=expired") ||
		!strings.Contains(logs.String(), "expires_in=1h0m0s") {
		t.Errorf("start-up warnings:\n%s", strings.Join(warned, "\n"))
	}

	check := func(when, token string, status int, code string) {
		t.Helper()
		r := do(t, s, "GET", "/v1/thing", token, "")
		if r.Status != status || errCode(r) != code {
			t.Errorf("%s, token %s: %d %q, want %d %q (%s)", when, token[:5], r.Status, errCode(r), status, code, r.Raw)
		}
		if code == CodeTokenExpired {
			e, _ := r.Body["error"].(map[string]any)
			d, _ := e["details"].(map[string]any)
			if r.Header.Get("WWW-Authenticate") == "" || d["token"] == nil || d["expires_at"] == nil {
				t.Errorf("%s: expired-token answer lacks WWW-Authenticate or details: %v %s", when, r.Header, r.Raw)
			}
		}
	}
	check("at start", readTok, 200, "")
	check("at start", soonTok, 200, "")
	check("at start", expiredTok, 401, CodeTokenExpired)
	check("at start", "unknown-token-0123456789", 401, CodeUnauthenticated)

	clock.Advance(time.Hour - time.Nanosecond)
	check("just before expiry", soonTok, 200, "")
	clock.Advance(time.Nanosecond)
	check("at expiry", soonTok, 401, CodeTokenExpired)
	check("at expiry", laterTok, 200, "")
	check("at expiry", readTok, 200, "")

	clock.Advance(30 * 24 * time.Hour)
	check("a month later", laterTok, 401, CodeTokenExpired)
	check("a month later", readTok, 200, "")
}

// With tokens on, every /v1/ request without a valid token gets 401,
// whether or not a route matches it: an unknown path or method must not
// answer 404/405 before authentication (that would let anyone enumerate
// the routes). With a valid token of any role the 404/405 come back; paths
// outside /v1/ are unaffected.
func TestAuthBeforeRouting(t *testing.T) {
	s := start(t, Options{Tokens: tokens()}, func(s *Server) {
		s.Handle("GET /v1/things/{id}", RoleRead, func(w http.ResponseWriter, r *http.Request) error {
			return WriteJSON(w, 200, map[string]string{})
		})
	})
	cases := []struct {
		method, path, token string
		status              int
		code                string
	}{
		{"GET", "/v1/nothing", "", 401, CodeUnauthenticated},
		{"GET", "/v1/nothing", "wrong-token-0123456789", 401, CodeUnauthenticated},
		{"PUT", "/v1/things/7", "", 401, CodeUnauthenticated},
		{"GET", "/v1", "", 401, CodeUnauthenticated},
		{"GET", "/v1/", "", 401, CodeUnauthenticated},
		{"GET", "/v1/things/7", "", 401, CodeUnauthenticated},
		{"GET", "/v1/nothing", readTok, 404, CodeNotFound},
		{"PUT", "/v1/things/7", readTok, 405, CodeMethodNotAllowed},
		{"GET", "/v1/things/7", readTok, 200, ""},
		{"GET", "/elsewhere", "", 404, CodeNotFound},
	}
	for _, c := range cases {
		r := do(t, s, c.method, c.path, c.token, "")
		if r.Status != c.status || errCode(r) != c.code {
			t.Errorf("%s %s token=%q: got %d %q, want %d %q (%s)", c.method, c.path, c.token, r.Status, errCode(r), c.status, c.code, r.Raw)
		}
	}
	// The mux's own redirect (a path that needs cleaning) is no way around it.
	req, _ := http.NewRequest("GET", s.URL()+"/v1/things/../nothing", nil)
	req.URL.Opaque = "/v1/things/../nothing"
	res, err := (&http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != 401 {
		t.Errorf("unclean path without token: %d, want 401", res.StatusCode)
	}
}

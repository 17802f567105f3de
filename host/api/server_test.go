package api

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.uber.org/goleak"

	"github.com/hostd-dev/hostd/internal/apispec"
	"github.com/hostd-dev/hostd/internal/syncbuf"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const (
	readTok  = "read-token-0123456789"
	writeTok = "write-token-0123456789"
	adminTok = "admin-token-0123456789"
)

// start runs a real server on a loopback port; setup registers routes.
func start(t *testing.T, opts Options, setup func(s *Server)) *Server {
	t.Helper()
	if opts.Listen == "" {
		opts.Listen = "127.0.0.1:0"
	}
	if opts.Wrap == nil {
		// Every exchange with a route of docs/openapi.json is checked
		// against it (the tests' own routes are not).
		spec := apispec.MustLoad()
		opts.Wrap = func(h http.Handler) http.Handler { return spec.Handler(t, false, h) }
	}
	s, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	if setup != nil {
		setup(s)
	}
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := s.Shutdown(ctx); err != nil {
			t.Error(err)
		}
	})
	return s
}

type resp struct {
	Status int
	Header http.Header
	Body   map[string]any
	Raw    string
}

func do(t *testing.T, s *Server, method, path, token, body string, hdr ...string) resp {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, s.URL()+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	raw, _ := io.ReadAll(res.Body)
	r := resp{Status: res.StatusCode, Header: res.Header, Raw: string(raw)}
	_ = json.Unmarshal(raw, &r.Body)
	return r
}

func errCode(r resp) string {
	e, _ := r.Body["error"].(map[string]any)
	c, _ := e["code"].(string)
	return c
}

func tokens() []Token {
	return []Token{{Name: "reader", Secret: readTok, Role: RoleRead}, {Name: "writer", Secret: writeTok, Role: RoleWrite},
		{Name: "admin", Secret: adminTok, Role: RoleAdmin}}
}

func TestAuthRoles(t *testing.T) {
	s := start(t, Options{Tokens: tokens()}, func(s *Server) {
		for _, r := range []struct {
			p    string
			role Role
		}{{"GET /v1/thing", RoleRead}, {"POST /v1/thing", RoleWrite}, {"POST /v1/admin/thing", RoleAdmin}} {
			s.Handle(r.p, r.role, func(w http.ResponseWriter, r *http.Request) error {
				p, _ := PrincipalFrom(r.Context())
				return WriteJSON(w, 200, map[string]string{"who": p.Name})
			})
		}
	})
	cases := []struct {
		method, path, token string
		status              int
		code                string
	}{
		{"GET", "/v1/thing", "", 401, CodeUnauthenticated},
		{"GET", "/v1/thing", "wrong-token-0123456789", 401, CodeUnauthenticated},
		{"GET", "/v1/thing", readTok, 200, ""},
		{"POST", "/v1/thing", readTok, 403, CodePermissionDenied},
		{"POST", "/v1/thing", writeTok, 200, ""},
		{"POST", "/v1/admin/thing", writeTok, 403, CodePermissionDenied},
		{"POST", "/v1/admin/thing", adminTok, 200, ""},
		{"GET", "/healthz", "", 200, ""},
		{"GET", "/healthz", "garbage", 200, ""},
		{"GET", "/v1/version", "", 401, CodeUnauthenticated},
		{"GET", "/v1/version", readTok, 200, ""},
	}
	for _, c := range cases {
		r := do(t, s, c.method, c.path, c.token, "")
		if r.Status != c.status || errCode(r) != c.code {
			t.Errorf("%s %s token=%q: got %d %q, want %d %q (%s)", c.method, c.path, c.token, r.Status, errCode(r), c.status, c.code, r.Raw)
		}
		if r.Status == 401 && r.Header.Get("WWW-Authenticate") == "" {
			t.Errorf("%s %s: 401 without WWW-Authenticate", c.method, c.path)
		}
	}
	r := do(t, s, "GET", "/v1/thing", "", "", "Authorization", "Basic abc")
	if r.Status != 401 || !strings.Contains(r.Raw, "malformed") {
		t.Errorf("basic auth: %d %s", r.Status, r.Raw)
	}
	if r := do(t, s, "POST", "/v1/thing", writeTok, ""); r.Body["who"] != "writer" {
		t.Errorf("principal: %s", r.Raw)
	}
}

func TestRefusesNonLoopbackWithoutTokens(t *testing.T) {
	for _, addr := range []string{"0.0.0.0:7070", ":7070", "10.1.2.3:7070", "[::]:7070"} {
		_, err := New(Options{Listen: addr})
		if !errors.Is(err, ErrInsecureListen) || !strings.Contains(err.Error(), "tokens") {
			t.Errorf("%s: got %v", addr, err)
		}
	}
	for _, addr := range []string{"127.0.0.1:0", "localhost:0", "[::1]:0"} {
		if _, err := New(Options{Listen: addr}); err != nil {
			t.Errorf("%s: %v", addr, err)
		}
	}
	if _, err := New(Options{Listen: "0.0.0.0:0", Tokens: tokens()}); err != nil {
		t.Errorf("with tokens: %v", err)
	}
}

type item struct {
	Name  string `json:"name"`
	Count int    `json:"count"`
}

func TestDecodeJSONAndErrors(t *testing.T) {
	s := start(t, Options{MaxBodyBytes: 1024}, func(s *Server) {
		s.Handle("POST /v1/items", RoleWrite, func(w http.ResponseWriter, r *http.Request) error {
			var it item
			if err := DecodeJSON(r, &it); err != nil {
				return err
			}
			if it.Name == "" {
				return InvalidField("name", "name is required")
			}
			return WriteJSON(w, http.StatusCreated, it)
		})
	})
	cases := []struct {
		name, body, ct string
		status         int
		code, says     string
	}{
		{"ok", `{"name":"a","count":2}`, "", 201, "", ""},
		{"ok json ct", `{"name":"a"}`, "application/json; charset=utf-8", 201, "", ""},
		{"empty", ``, "", 400, CodeInvalidArgument, "empty"},
		{"syntax", `{"name":`, "", 400, CodeInvalidArgument, "truncated"},
		{"garbage", `{"name" x}`, "", 400, CodeInvalidArgument, "not valid JSON"},
		{"unknown field", `{"name":"a","nmae":"b"}`, "", 400, CodeInvalidArgument, `unknown field \"nmae\"`},
		{"type", `{"name":5}`, "", 400, CodeInvalidArgument, `field \"name\" must be a string`},
		{"not object", `[1]`, "", 400, CodeInvalidArgument, "an object"},
		{"trailing", `{"name":"a"} {}`, "", 400, CodeInvalidArgument, "exactly one"},
		{"validation", `{"count":1}`, "", 400, CodeInvalidArgument, "required"},
		{"content type", `name=a`, "application/x-www-form-urlencoded", 415, CodeUnsupportedMedia, "application/json"},
		{"too large", `{"name":"` + strings.Repeat("x", 2000) + `"}`, "", 413, CodeTooLarge, "1024"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var hdr []string
			if c.ct != "" {
				hdr = []string{"Content-Type", c.ct}
			}
			r := do(t, s, "POST", "/v1/items", "", c.body, hdr...)
			if r.Status != c.status || errCode(r) != c.code || !strings.Contains(r.Raw, c.says) {
				t.Fatalf("got %d %s, want %d %s containing %q", r.Status, r.Raw, c.status, c.code, c.says)
			}
			if c.code != "" {
				if _, ok := r.Body["error"].(map[string]any)["message"].(string); !ok {
					t.Fatalf("no message: %s", r.Raw)
				}
			}
		})
	}
	if r := do(t, s, "POST", "/v1/items", "", `{"count":1}`); r.Body["error"].(map[string]any)["details"].(map[string]any)["field"] != "name" {
		t.Errorf("details.field missing: %s", r.Raw)
	}
}

func TestNotFoundAndMethodNotAllowed(t *testing.T) {
	s := start(t, Options{}, func(s *Server) {
		s.Handle("GET /v1/things/{id}", RoleRead, func(w http.ResponseWriter, r *http.Request) error {
			return NotFound("thing %q not found", r.PathValue("id")).With("id", r.PathValue("id"))
		})
		s.Handle("DELETE /v1/things/{id}", RoleWrite, func(w http.ResponseWriter, r *http.Request) error {
			w.WriteHeader(204)
			return nil
		})
	})
	if r := do(t, s, "GET", "/v1/nothing", "", ""); r.Status != 404 || errCode(r) != CodeNotFound {
		t.Errorf("no route: %d %s", r.Status, r.Raw)
	}
	r := do(t, s, "PUT", "/v1/things/7", "", "")
	if r.Status != 405 || errCode(r) != CodeMethodNotAllowed || r.Header.Get("Allow") != "GET, DELETE" {
		t.Errorf("405: %d %s allow=%q", r.Status, r.Raw, r.Header.Get("Allow"))
	}
	r = do(t, s, "GET", "/v1/things/7", "", "")
	if r.Status != 404 || r.Body["error"].(map[string]any)["details"].(map[string]any)["id"] != "7" {
		t.Errorf("handler 404: %d %s", r.Status, r.Raw)
	}
	if r := do(t, s, "DELETE", "/v1/things/7", "", ""); r.Status != 204 {
		t.Errorf("delete: %d", r.Status)
	}
}

var errFeature = errors.New("feature: thing is busy")

func TestPanicAndErrorMapping(t *testing.T) {
	logs := &syncbuf.Buffer{}
	s := start(t, Options{Logger: slog.New(slog.NewTextHandler(logs, nil))}, func(s *Server) {
		s.Handle("GET /v1/panic", RoleRead, func(w http.ResponseWriter, r *http.Request) error {
			var none []int
			return WriteJSON(w, 200, none[len(r.URL.Path)]) // index out of range: a real runtime panic
		})
		s.Handle("GET /v1/plain", RoleRead, func(w http.ResponseWriter, r *http.Request) error {
			return errors.New("disk on fire")
		})
		s.Handle("GET /v1/mapped", RoleRead, func(w http.ResponseWriter, r *http.Request) error {
			return errors.Join(errFeature)
		})
		s.Handle("GET /v1/slow", RoleRead, func(w http.ResponseWriter, r *http.Request) error {
			<-r.Context().Done()
			return r.Context().Err()
		}, WithTimeout(50*time.Millisecond))
		s.MapErrors(func(err error) *Error {
			if errors.Is(err, errFeature) {
				return Conflict("%v", err)
			}
			return nil
		})
	})
	r := do(t, s, "GET", "/v1/panic", "", "")
	if r.Status != 500 || errCode(r) != CodeInternal {
		t.Errorf("panic: %d %s", r.Status, r.Raw)
	}
	if !strings.Contains(logs.String(), "panicked") || !strings.Contains(logs.String(), "index out of range") {
		t.Errorf("panic not logged: %s", logs.String())
	}
	r = do(t, s, "GET", "/v1/plain", "", "")
	if r.Status != 500 || errCode(r) != CodeInternal || strings.Contains(r.Raw, "fire") {
		t.Errorf("plain error must be 500 internal without the cause: %d %s", r.Status, r.Raw)
	}
	if r := do(t, s, "GET", "/v1/mapped", "", ""); r.Status != 409 || errCode(r) != CodeConflict {
		t.Errorf("mapped: %d %s", r.Status, r.Raw)
	}
	if r := do(t, s, "GET", "/v1/slow", "", ""); r.Status != 504 || errCode(r) != CodeTimeout {
		t.Errorf("timeout: %d %s", r.Status, r.Raw)
	}
	// The server still serves after a panic.
	if r := do(t, s, "GET", "/healthz", "", ""); r.Status != 200 {
		t.Errorf("after panic: %d", r.Status)
	}
}

func TestPagination(t *testing.T) {
	all := []item{{Name: "a"}, {Name: "b"}, {Name: "c"}, {Name: "d"}, {Name: "e"}}
	s := start(t, Options{}, func(s *Server) {
		s.Handle("GET /v1/items", RoleRead, func(w http.ResponseWriter, r *http.Request) error {
			p, err := PageParams(r)
			if err != nil {
				return err
			}
			after, err := DecodePageToken(p.Token)
			if err != nil {
				return err
			}
			var out []item
			next := ""
			for _, it := range all {
				if it.Name <= string(after) {
					continue
				}
				if len(out) == p.Limit {
					next = EncodePageToken([]byte(out[len(out)-1].Name))
					break
				}
				out = append(out, it)
			}
			return WriteList(w, out, next)
		})
	})
	var got []string
	tok := ""
	for pages := 0; ; pages++ {
		if pages > 5 {
			t.Fatal("pagination does not end")
		}
		r := do(t, s, "GET", "/v1/items?limit=2&page_token="+tok, "", "")
		if r.Status != 200 {
			t.Fatalf("%d %s", r.Status, r.Raw)
		}
		for _, it := range r.Body["items"].([]any) {
			got = append(got, it.(map[string]any)["name"].(string))
		}
		tok = r.Body["next_page_token"].(string)
		if tok == "" {
			break
		}
	}
	if strings.Join(got, "") != "abcde" {
		t.Fatalf("got %v", got)
	}
	if r := do(t, s, "GET", "/v1/items?page_token="+EncodePageToken([]byte("z")), "", ""); r.Raw != "{\"items\":[],\"next_page_token\":\"\"}\n" {
		t.Errorf("empty page must have items []: %q", r.Raw)
	}
	for _, q := range []string{"limit=0", "limit=1001", "limit=x", "page_token=!!"} {
		if r := do(t, s, "GET", "/v1/items?"+q, "", ""); r.Status != 400 || errCode(r) != CodeInvalidArgument {
			t.Errorf("%s: %d %s", q, r.Status, r.Raw)
		}
	}
}

func TestReadyzAndTracing(t *testing.T) {
	var mu sync.Mutex
	waiting := []string{"broadcast recovery"}
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	defer tp.Shutdown(context.Background())
	s := start(t, Options{TracerProvider: tp, Ready: func() []string {
		mu.Lock()
		defer mu.Unlock()
		return waiting
	}}, nil)
	r := do(t, s, "GET", "/readyz", "", "")
	if r.Status != 503 || errCode(r) != CodeUnavailable || !strings.Contains(r.Raw, "broadcast recovery") {
		t.Errorf("not ready: %d %s", r.Status, r.Raw)
	}
	mu.Lock()
	waiting = nil
	mu.Unlock()
	if r := do(t, s, "GET", "/readyz", "", ""); r.Status != 200 {
		t.Errorf("ready: %d %s", r.Status, r.Raw)
	}
	// A caller's traceparent becomes the parent of the SERVER span.
	const tid = "4bf92f3577b34da6a3ce929d0e0e4736"
	do(t, s, "GET", "/v1/version", "", "", "traceparent", "00-"+tid+"-00f067aa0ba902b7-01")
	var found bool
	for _, sp := range rec.Ended() {
		if sp.Name() == "GET /v1/version" {
			found = true
			if sp.SpanContext().TraceID().String() != tid || sp.Parent().SpanID().String() != "00f067aa0ba902b7" {
				t.Errorf("span not a child of the caller: %v parent %v", sp.SpanContext(), sp.Parent())
			}
		}
	}
	if !found {
		t.Error("no server span")
	}
	// Probes and scrapes are not traced (they would bury the broadcasts).
	do(t, s, "GET", "/healthz", "", "")
	for _, sp := range rec.Ended() {
		if sp.Name() == "GET /healthz" || sp.Name() == "GET /readyz" {
			t.Errorf("probe traced: %s", sp.Name())
		}
	}
}

func TestShutdownWaitsForInFlight(t *testing.T) {
	entered := make(chan struct{})
	release := make(chan struct{})
	s, err := New(Options{Listen: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	s.Handle("POST /v1/slow", RoleWrite, func(w http.ResponseWriter, r *http.Request) error {
		close(entered)
		<-release
		return WriteJSON(w, 200, map[string]string{"done": "yes"})
	})
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	result := make(chan resp, 1)
	go func() { result <- do(t, s, "POST", "/v1/slow", "", "{}") }()
	<-entered
	shut := make(chan error, 1)
	go func() { shut <- s.Shutdown(context.Background()) }()
	time.Sleep(50 * time.Millisecond)
	select {
	case err := <-shut:
		t.Fatalf("Shutdown returned before the in-flight request finished: %v", err)
	default:
	}
	close(release)
	if r := <-result; r.Status != 200 || r.Body["done"] != "yes" {
		t.Fatalf("in-flight request: %d %s", r.Status, r.Raw)
	}
	if err := <-shut; err != nil {
		t.Fatal(err)
	}
	http.DefaultClient.CloseIdleConnections()
}

func TestShutdownTwice(t *testing.T) {
	s, err := New(Options{Listen: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 2; i++ {
		if err := s.Shutdown(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
}

// /readyz answering 503 while hostd starts is the probe doing its job: it
// is logged at DEBUG, never at ERROR or WARN. A 503 from any other route
// still is.
func TestReadyzNotReadyIsNotAnError(t *testing.T) {
	logs := &syncbuf.Buffer{}
	s := start(t, Options{Logger: slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
		Ready: func() []string { return []string{"broadcast recovery"} }}, func(s *Server) {
		s.Handle("GET /v1/down", RoleRead, func(w http.ResponseWriter, r *http.Request) error {
			return Unavailable("the engine is closed")
		})
	})
	for i := 0; i < 3; i++ {
		if r := do(t, s, "GET", "/readyz", "", ""); r.Status != 503 {
			t.Fatalf("readyz: %d", r.Status)
		}
	}
	for _, line := range strings.Split(logs.String(), "\n") {
		if strings.Contains(line, "readyz") && (strings.Contains(line, "level=ERROR") || strings.Contains(line, "level=WARN")) {
			t.Errorf("readyz 503 logged as a problem: %s", line)
		}
	}
	if !strings.Contains(logs.String(), "level=DEBUG") {
		t.Errorf("readyz 503 not logged at debug:\n%s", logs.String())
	}
	do(t, s, "GET", "/v1/down", "", "")
	if !strings.Contains(logs.String(), `level=ERROR msg="api request failed" route="GET /v1/down"`) {
		t.Errorf("a 503 from an API route is still an error:\n%s", logs.String())
	}
}

package api_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/hostd-dev/hostd/host"
	"github.com/hostd-dev/hostd/host/config"
)

// FuzzAPI sends random methods, paths, queries and bodies to every route
// of the whole in-process daemon (real catalog, every feature wired by
// host.Open) through its HTTP handler. Whatever arrives, the answer is
// never a 5xx (a recovered handler panic is a 500), every error has the
// API's error shape, and afterwards the daemon is still consistent:
// /readyz is ready and a valid broadcast still completes.
//
//	go test ./host/api -run '^$' -fuzz '^FuzzAPI$' -fuzztime 30s -fuzzminimizetime 5s
//
// Each input costs milliseconds (a request, /readyz and a probe
// broadcast), so Go's default minimization of every new interesting input
// (up to 60 s, hundreds of executions per byte of a string) stalls the
// workers at 0 execs/s; -fuzzminimizetime keeps that short (make fuzz).
func FuzzAPI(f *testing.F) {
	cfg := config.Default()
	cfg.API.Listen = "127.0.0.1:0"
	cfg.Data.Dir = f.TempDir()
	cfg.Data.SyncWrites = false
	cfg.Broadcast.Vchannels = []string{"orders/0", "orders/1"}
	h, err := host.Open(context.Background(), &cfg, host.Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		f.Fatal(err)
	}
	if err := h.Start(context.Background()); err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { _ = h.Shutdown(context.Background()) })
	srv := h.API()
	routes := srv.Routes()
	if len(routes) < 20 {
		f.Fatalf("only %d routes registered", len(routes))
	}

	seeds := []struct {
		route, method uint8
		seg, query    string
		body          string
	}{
		{0, 0, "1", "", `{"type":"noop","vchannels":["orders/0"],"idempotency_key":"k1"}`},
		{1, 0, "orders", "limit=0", `{}`},
		{2, 1, "../..", "page_token=%%%", `{"keys":[{"domain":"d","key":"k"}],"owner":"o","ttl":"1s"}`},
		{3, 2, "18446744073709551616", "wait=10h", `{"topic":"t","queues":2}`},
		{4, 0, "t", "from=99999999999999999999", `{"records":[{"payload_text":"x"}],"producer_id":"p","seq":1}`},
		{5, 3, "", "", `{"vchannel":"orders/0"}`},
		{6, 0, "x\x00y", "time=yesterday", `{"type":"","payload":"!!"}`},
		{7, 0, "orders/0", "prefix=", `[1,2,3]`},
		{8, 4, "a", "limit=-1", `{"brokers":["nope"],"dry_run":true}`},
		{9, 0, "g", "vchannel=orders/0", `{"vchannel":"orders/0","offset":18446744073709551615}`},
		{10, 0, "1", "", `{"reason":"` + strings.Repeat("r", 5000) + `"}`},
		{11, 0, "1", "", `null`},
		{12, 5, "1", "", `{"domain":"d","key":"k","fence":1}`},
		{13, 0, "1", "", `{"type":"noop","timeout":"-1s","wait":"forever"}`},
		{14, 0, "k", "", `{"key":"k","holder":"h","ttl":"1h"}`},
		{15, 0, "1", "", "{\"a\":\"\xff\"}"},
		{16, 6, "1", "", ``},
		{17, 0, "1", "", `{"type":"noop","scope":"bogus","resource_keys":[{"domain":"cluster","key":"cluster","mode":"exclusive"}],"ack_sync_up":true,"wait":"persisted"}`},
	}
	for _, s := range seeds {
		f.Add(s.route, s.method, s.seg, s.query, []byte(s.body))
	}
	methods := []string{"", http.MethodGet, http.MethodPost, http.MethodPut, http.MethodDelete, http.MethodPatch, http.MethodHead, http.MethodOptions}
	n := 0
	f.Fuzz(func(t *testing.T, route, method uint8, seg, query string, body []byte) {
		rt := routes[int(route)%len(routes)]
		m := methods[int(method)%len(methods)]
		if m == "" {
			m = rt.Method
		}
		path := fillPattern(rt.Path, seg)
		u := "http://hostd" + path
		if query != "" {
			u += "?" + query
		}
		req, err := http.NewRequest(m, u, bytes.NewReader(body))
		if err != nil {
			return // not a request an HTTP server would hand to the API
		}
		if len(body) > 0 && body[0]%2 == 0 {
			req.Header.Set("Content-Type", "application/json")
		}
		// Long polls, queued lock acquires and broadcast waits end here
		// rather than after the 30 s API deadline.
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		defer cancel()
		rec := httptest.NewRecorder()
		srv.ServeHTTP(rec, req.WithContext(ctx))
		checkAnswer(t, m+" "+path, rec)

		// Consistency after the input.
		n++
		rec = httptest.NewRecorder()
		srv.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/readyz", nil))
		if rec.Code != http.StatusOK {
			t.Fatalf("after %s %s: /readyz %d %s", m, path, rec.Code, rec.Body)
		}
		probeBroadcast(t, srv, fmt.Sprintf("fuzz-probe-%d", n))
	})
}

// fillPattern puts seg into every {wildcard} of a route path.
func fillPattern(p, seg string) string {
	for {
		i := strings.IndexByte(p, '{')
		if i < 0 {
			return p
		}
		j := strings.IndexByte(p[i:], '}')
		if j < 0 {
			return p
		}
		p = p[:i] + seg + p[i+j+1:]
	}
}

// checkAnswer: no 5xx other than 503/504 (not ready, deadline), and every
// error in the one error shape with a code.
func checkAnswer(t *testing.T, what string, rec *httptest.ResponseRecorder) {
	t.Helper()
	if rec.Code >= 500 && rec.Code != http.StatusServiceUnavailable && rec.Code != http.StatusGatewayTimeout {
		t.Fatalf("%s: %d %s", what, rec.Code, rec.Body)
	}
	if rec.Code < 400 || strings.HasPrefix(what, http.MethodHead) {
		return
	}
	var e struct {
		Error struct {
			Code    string `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &e); err != nil || e.Error.Code == "" || e.Error.Message == "" {
		t.Fatalf("%s: %d with a body not in the error shape: %q", what, rec.Code, rec.Body)
	}
}

// probeBroadcast abandons whatever the fuzz input left PENDING (an
// AckSyncUp broadcast nobody acks may hold an exclusive key, as an
// operator would then do) and checks that a valid broadcast completes.
func probeBroadcast(t *testing.T, srv http.Handler, key string) {
	t.Helper()
	do := func(method, path, body string) *httptest.ResponseRecorder {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		rec := httptest.NewRecorder()
		r := httptest.NewRequest(method, path, strings.NewReader(body)).WithContext(ctx)
		srv.ServeHTTP(rec, r)
		return rec
	}
	rec := do(http.MethodGet, "/v1/broadcasts?state=PENDING&limit=1000", "")
	var ls struct {
		Items []struct {
			ID uint64 `json:"id"`
		} `json:"items"`
	}
	if rec.Code != http.StatusOK || json.Unmarshal(rec.Body.Bytes(), &ls) != nil {
		t.Fatalf("list pending: %d %s", rec.Code, rec.Body)
	}
	for _, it := range ls.Items {
		rec := do(http.MethodPost, fmt.Sprintf("/v1/broadcasts/%d/abandon", it.ID), `{"reason":"fuzz cleanup"}`)
		if rec.Code != http.StatusOK && rec.Code != http.StatusConflict {
			t.Fatalf("abandon %d: %d %s", it.ID, rec.Code, rec.Body)
		}
	}
	rec = do(http.MethodPost, "/v1/broadcasts",
		`{"type":"noop","vchannels":["orders/0","orders/1"],"idempotency_key":"`+key+`","timeout":"10s"}`)
	var res struct {
		State string `json:"state"`
	}
	if rec.Code != http.StatusOK || json.Unmarshal(rec.Body.Bytes(), &res) != nil || res.State != "TOMBSTONE" {
		b, _ := io.ReadAll(rec.Body)
		t.Fatalf("probe broadcast after the input did not complete: %d %s", rec.Code, b)
	}
}

package client

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

func TestNewAddresses(t *testing.T) {
	for in, want := range map[string]string{
		"127.0.0.1:7070":          "http://127.0.0.1:7070",
		"http://localhost:7070/":  "http://localhost:7070",
		"https://hostd.example:1": "https://hostd.example:1",
	} {
		c, err := New(in)
		if err != nil || c.Addr() != want {
			t.Errorf("New(%q) = %v, %v; want %s", in, c, err, want)
		}
	}
	for _, bad := range []string{"", "ftp://x", "http://", "::::"} {
		if _, err := New(bad); err == nil {
			t.Errorf("New(%q) accepted", bad)
		}
	}
}

func TestDoAndErrors(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/v1/echo":
			if r.Header.Get("Authorization") != "Bearer tok" || r.Header.Get("Content-Type") != "application/json" {
				w.WriteHeader(401)
				return
			}
			b, _ := io.ReadAll(r.Body)
			w.Header().Set("Content-Type", "application/json")
			w.Write([]byte(`{"got":` + string(b) + `,"q":"` + r.URL.Query().Get("limit") + `"}`))
		case "/v1/kv/a/b":
			w.Write([]byte(`"` + r.URL.EscapedPath() + `"`))
		case "/v1/missing":
			w.WriteHeader(404)
			w.Write([]byte(`{"error":{"code":"not_found","message":"no such thing","details":{"id":"7"}}}`))
		default:
			w.WriteHeader(502)
			w.Write([]byte("<html>bad gateway</html>"))
		}
	}))
	defer srv.Close()
	c, err := New(srv.URL, WithToken("tok"))
	if err != nil {
		t.Fatal(err)
	}
	var out struct {
		Got map[string]int `json:"got"`
		Q   string         `json:"q"`
	}
	if err := c.Do(context.Background(), "POST", Page{Limit: 5}.Query("/v1/echo"), map[string]int{"a": 1}, &out); err != nil {
		t.Fatal(err)
	}
	if out.Got["a"] != 1 || out.Q != "5" {
		t.Fatalf("out %+v", out)
	}
	var escaped string
	if err := c.Do(context.Background(), "GET", "/v1/kv/a%2Fb", nil, &escaped); err != nil || escaped != "/v1/kv/a%2Fb" {
		t.Fatalf("escaped path: %q %v", escaped, err)
	}
	err = c.Do(context.Background(), "GET", "/v1/missing", nil, nil)
	var ce *Error
	if !errors.As(err, &ce) || ce.Status != 404 || ce.Code != "not_found" || ce.Details["id"] != "7" || !IsNotFound(err) {
		t.Fatalf("API error: %#v", err)
	}
	err = c.Do(context.Background(), "GET", "/other", nil, nil)
	if !errors.As(err, &ce) || ce.Status != 502 || ce.Code != "http_502" || !strings.Contains(ce.Message, "bad gateway") {
		t.Fatalf("non-API error: %#v", err)
	}
}

func TestPageQuery(t *testing.T) {
	if got := (Page{}).Query("/v1/x"); got != "/v1/x" {
		t.Error(got)
	}
	if got := (Page{Limit: 2, Token: "a b"}).Query("/v1/x?state=done"); got != "/v1/x?state=done&limit=2&page_token=a+b" {
		t.Error(got)
	}
}

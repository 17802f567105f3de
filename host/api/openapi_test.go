package api

import (
	"net/http"
	"testing"

	"github.com/hostd-dev/hostd/docs"
)

// TestOpenAPIServed: GET /v1/openapi.json answers the embedded
// docs/openapi.json to a read token, and nothing without a token (the
// routes are not listed to strangers).
func TestOpenAPIServed(t *testing.T) {
	s := start(t, Options{Tokens: tokens()}, nil)
	if r := do(t, s, "GET", "/v1/openapi.json", "", ""); r.Status != http.StatusUnauthorized {
		t.Fatalf("without a token: %d %s", r.Status, r.Raw)
	}
	r := do(t, s, "GET", "/v1/openapi.json", readTok, "")
	if r.Status != http.StatusOK || r.Raw != string(docs.OpenAPI) || r.Header.Get("Content-Type") != "application/json" {
		t.Fatalf("with a read token: %d %q, %d bytes (want the %d bytes of docs/openapi.json)", r.Status, r.Header.Get("Content-Type"), len(r.Raw), len(docs.OpenAPI))
	}
	if r.Body["openapi"] != "3.1.0" {
		t.Fatalf("not an OpenAPI 3.1 document: %v", r.Body["openapi"])
	}
}

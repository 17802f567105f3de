package config

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// api.tokens[].expires_at: an RFC 3339 time (quoted or not in YAML) or
// empty; anything else is a problem with its key path, reported with the
// others.
func TestTokenExpiresAt(t *testing.T) {
	f := writeFile(t, `
api:
  tokens:
    - {name: a, token: "0123456789abcdef0", role: admin, expires_at: "2027-01-31T00:00:00Z"}
    - {name: b, token: "0123456789abcdef1", role: read, expires_at: 2027-02-01T10:30:00+01:00}
    - {name: c, token: "0123456789abcdef2", role: read}
`)
	cfg, err := Load(Source{File: f, Env: []string{}})
	if err != nil {
		t.Fatal(err)
	}
	want := []time.Time{time.Date(2027, 1, 31, 0, 0, 0, 0, time.UTC), time.Date(2027, 2, 1, 9, 30, 0, 0, time.UTC), {}}
	for i, tok := range cfg.API.Tokens {
		got, err := tok.Expiry()
		if err != nil || !got.Equal(want[i]) {
			t.Errorf("token %s: expiry %v %v, want %v", tok.Name, got, err, want[i])
		}
	}

	f = writeFile(t, `
api:
  tokens:
    - {name: a, token: "0123456789abcdef0", role: admin, expires_at: "next tuesday"}
    - {name: b, token: "0123456789abcdef1", role: read, expires_at: "2027-01-31"}
    - {name: c, token: "short", role: read, expires_at: "2027-01-31T00:00:00Z"}
`)
	_, err = Load(Source{File: f, Env: []string{}})
	wantKeys := []string{"api.tokens[0].expires_at", "api.tokens[1].expires_at", "api.tokens[2].token"}
	if diff := cmp.Diff(wantKeys, keysOf(problemsOf(t, err))); diff != "" {
		t.Fatalf("(-want +got):\n%s\n%v", diff, err)
	}
}

package config

import (
	"strings"
	"testing"
)

// A max_payload whose task record (base64, 4/3 of it) can never fit one
// catalog value is refused at load, with the size that would fit.
func TestBroadcastMaxPayloadMustFitCatalog(t *testing.T) {
	for _, tc := range []struct {
		yaml string
		ok   bool
	}{
		{"broadcast:\n  max_payload: 512KiB\n", true},
		{"broadcast:\n  max_payload: 1MiB\n", false},
		{"broadcast:\n  max_payload: 800KiB\n", false},
		{"broadcast:\n  max_payload: 700KiB\n  max_key_length: 4096\n  vchannels: [a/0, b/0]\n", true},
	} {
		_, err := Load(Source{File: writeFile(t, tc.yaml), Env: []string{}})
		if tc.ok {
			if err != nil {
				t.Errorf("%q: %v", tc.yaml, err)
			}
			continue
		}
		ps := problemsOf(t, err)
		if len(ps) != 1 || ps[0].Key != "broadcast.max_payload" || !strings.Contains(err.Error(), "_size") && !strings.Contains(err.Error(), "max_record_bytes") || !strings.Contains(err.Error(), "fits") {
			t.Errorf("%q: want one broadcast.max_payload problem naming the limit, got %v", tc.yaml, err)
		}
	}
	if d := Default(); int64(d.Broadcast.MaxPayload) != 512<<10 {
		t.Errorf("default max_payload %d, want 512KiB", d.Broadcast.MaxPayload)
	}
}

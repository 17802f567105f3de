package api

import (
	"bytes"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"unicode/utf8"
)

func TestInvalidJSONString(t *testing.T) {
	cases := []struct {
		name, body string
		field      string // "" = valid
		key        bool
	}{
		{"valid", `{"items":[{"key":"a"},{"key":"é\u00e9😀\ud83d\ude00"}]}`, "", false},
		{"raw byte in nested value", "{\"items\":[{\"key\":\"a\"},{\"key\":\"a\xffb\"}]}", "items[1].key", false},
		{"truncated sequence", "{\"k\":\"\xe2\x82\"}", "k", false},
		{"overlong encoding", "{\"k\":\"\xc0\xaf\"}", "k", false},
		{"encoded surrogate", "{\"k\":\"\xed\xa0\x80\"}", "k", false},
		{"lone high surrogate escape", `{"p":{"x":"\ud800"}}`, "p.x", false},
		{"high surrogate then other escape", `{"p":{"x":"\ud800\u0041"}}`, "p.x", false},
		{"lone low surrogate escape", `{"a":[1,"ok",["\uDC00"]]}`, "a[2][0]", false},
		{"bad object key", "{\"props\":{\"a\xff\":\"v\"}}", "props", true},
		{"bad top-level key", "{\"a\xff\":1}", "body", true},
		{"top-level string", "\"\xff\"", "body", false},
		{"escaped quote and backslash", `{"k":"a\"\\\/\n"}`, "", false},
		{"numbers and literals", `{"a":1.5e3,"b":true,"c":null,"d":[-1,false]}`, "", false},
		{"syntax error left to decoder", "{\"k\" 1, \"j\":\"\xff\"}", "", false},
		{"truncated", `{"k":"abc`, "", false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			field, key, bad := invalidJSONString([]byte(c.body))
			if bad != (c.field != "") || field != c.field || key != c.key {
				t.Fatalf("got field=%q key=%v bad=%v, want field=%q key=%v", field, key, bad, c.field, c.key)
			}
		})
	}
	// Nesting deeper than the checker follows is not reported (the decoder
	// refuses it) and does not blow the stack.
	deep := strings.Repeat("[", 20000) + strings.Repeat("]", 20000)
	if _, _, bad := invalidJSONString([]byte(deep)); bad {
		t.Error("deep nesting reported as invalid UTF-8")
	}
}

// Through the real server: invalid UTF-8 in a body field, a path
// parameter or a query parameter is 400 invalid_argument naming the field;
// nothing reaches the handler, and the two keys that encoding/json would
// both turn into "a\uFFFD" are no longer the same key.
func TestInvalidUTF8Refused(t *testing.T) {
	var seen []string
	s := start(t, Options{}, func(s *Server) {
		s.Handle("POST /v1/things/{id}", RoleWrite, func(w http.ResponseWriter, r *http.Request) error {
			var body struct {
				Items []struct {
					Key string `json:"key"`
				} `json:"items"`
				Properties map[string]string `json:"properties"`
			}
			if err := DecodeJSON(r, &body); err != nil {
				return err
			}
			for _, it := range body.Items {
				seen = append(seen, it.Key)
			}
			return WriteJSON(w, 200, map[string]string{})
		})
	})
	cases := []struct {
		name, path, body string
		status           int
		field            string
	}{
		{"ok", "/v1/things/a?mode=x", `{"items":[{"key":"é"}]}`, 200, ""},
		{"body item key", "/v1/things/a", "{\"items\":[{\"key\":\"a\"},{\"key\":\"a\xff\"}]}", 400, "items[1].key"},
		{"other invalid key, same U+FFFD", "/v1/things/a", "{\"items\":[{\"key\":\"a\xfe\"}]}", 400, "items[0].key"},
		{"surrogate escape", "/v1/things/a", `{"items":[{"key":"a\udfff"}]}`, 400, "items[0].key"},
		{"property value", "/v1/things/a", "{\"properties\":{\"p\":\"\xff\"}}", 400, "properties.p"},
		{"property name", "/v1/things/a", "{\"properties\":{\"\xff\":\"v\"}}", 400, "properties"},
		{"path parameter", "/v1/things/a%FF", `{}`, 400, "id"},
		{"query parameter", "/v1/things/a?z=1&mode=%C3%28", `{}`, 400, "mode"},
		{"query name", "/v1/things/a?%FF=1", `{}`, 400, "query"},
		{"valid escaped query", "/v1/things/a?mode=%C3%A9", `{}`, 200, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := do(t, s, "POST", c.path, "", c.body)
			if r.Status != c.status {
				t.Fatalf("got %d %s, want %d", r.Status, r.Raw, c.status)
			}
			if c.field == "" {
				return
			}
			e, _ := r.Body["error"].(map[string]any)
			d, _ := e["details"].(map[string]any)
			if e["code"] != CodeInvalidArgument || d["field"] != c.field || !strings.Contains(r.Raw, "UTF-8") {
				t.Fatalf("got %s, want invalid_argument with details.field %q", r.Raw, c.field)
			}
		})
	}
	if len(seen) != 1 || seen[0] != "é" {
		t.Errorf("the handler saw %q; only the valid request should reach it", seen)
	}
}

// FuzzInvalidJSONString checks the checker against encoding/json itself:
// for valid JSON, the checker reports a string exactly when decoding would
// have introduced a U+FFFD that the text did not already spell.
func FuzzInvalidJSONString(f *testing.F) {
	for _, s := range []string{`{"items":[{"key":"a"},{"key":"b"}]}`, "{\"k\":\"\xff\"}", `{"k":"\ud800"}`,
		`["\ud83d\ude00"]`, "{\"\xc3\":1}", `"x"`, `{"a":{"b":[1,2,{"c":"\uDC01"}]}}`, `{"k":"\ufffd"}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		field, _, bad := invalidJSONString(b)
		if bad && field == "" {
			t.Fatalf("%q: bad without a field", b)
		}
		if !json.Valid(b) {
			return
		}
		var v any
		if err := json.Unmarshal(b, &v); err != nil {
			return
		}
		spelled := bytes.ContainsRune(b, utf8.RuneError) || bytes.Contains(bytes.ToLower(b), []byte(`\ufffd`))
		replaced := hasReplacement(v)
		if bad && !replaced {
			t.Fatalf("%q: reported %s, but decoding replaces nothing", b, field)
		}
		if !bad && replaced && !spelled {
			t.Fatalf("%q: decoding introduces U+FFFD, not reported", b)
		}
	})
}

func hasReplacement(v any) bool {
	switch v := v.(type) {
	case string:
		return strings.ContainsRune(v, utf8.RuneError)
	case []any:
		for _, e := range v {
			if hasReplacement(e) {
				return true
			}
		}
	case map[string]any:
		for k, e := range v {
			if strings.ContainsRune(k, utf8.RuneError) || hasReplacement(e) {
				return true
			}
		}
	}
	return false
}

// BenchmarkInvalidJSONString measures the UTF-8 check of a typical
// broadcast body against encoding/json's own validity scan of the same
// bytes (the baseline DecodeJSON pays anyway).
func BenchmarkInvalidJSONString(b *testing.B) {
	var sb strings.Builder
	sb.WriteString(`{"type":"CreateCollection","payload_text":"`)
	sb.WriteString(strings.Repeat("héllo wörld ", 300))
	sb.WriteString(`","properties":{"a":"1","b":"2"},"vchannels":["orders/0","orders/1"],"idempotency_key":"req-42"}`)
	body := []byte(sb.String())
	b.Run("check", func(b *testing.B) {
		b.SetBytes(int64(len(body)))
		for b.Loop() {
			if _, _, bad := invalidJSONString(body); bad {
				b.Fatal("reported")
			}
		}
	})
	b.Run("json.Valid", func(b *testing.B) {
		b.SetBytes(int64(len(body)))
		for b.Loop() {
			if !json.Valid(body) {
				b.Fatal("invalid")
			}
		}
	})
}

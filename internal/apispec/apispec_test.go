package apispec

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

func TestSpecIsValid(t *testing.T) {
	s, err := Load()
	if err != nil {
		t.Fatal(err)
	}
	if len(s.Ops()) < 40 {
		t.Fatalf("only %d operations", len(s.Ops()))
	}
}

// TestCheckCatchesDrift is the validator's self-test: each kind of drift
// between an exchange and the spec is reported, and a faithful exchange
// is not.
func TestCheckCatchesDrift(t *testing.T) {
	s := MustLoad()
	jsonHdr := http.Header{"Content-Type": {"application/json"}}
	ex := func(method, target, reqBody string, status int, respBody string) *Exchange {
		r := httptest.NewRequest(method, target, strings.NewReader(reqBody))
		if reqBody != "" {
			r.Header.Set("Content-Type", "application/json")
		}
		return &Exchange{Request: r, RequestBody: []byte(reqBody), Status: status, Header: jsonHdr, ResponseBody: []byte(respBody)}
	}
	const tick = `"1764633600123456789"`
	readOK := `{"vchannel":"t/0","messages":[{"offset":0,"physical_queue":"b/0","physical_offset":0,"time_tick":` + tick +
		`,"time":"2026-01-02T03:04:05Z","payload":"aGk=","kind":"data"}],"next":1,"min":0,"max":1}`
	good := []*Exchange{
		ex("GET", "/v1/version", "", 200, `{"version":"v","go_version":"go1"}`),
		ex("GET", "/v1/channels/t/0/messages?from=0&limit=10", "", 200, readOK),
		ex("GET", "/v1/plugins/p/kv/a/b/c", "", 404, `{"error":{"code":"not_found","message":"no"}}`),
		ex("POST", "/v1/broadcasts", `{"type":"x","vchannels":["t/0"]}`, 200, `{"id":1,"duplicate":false,"state":"TOMBSTONE"}`),
		ex("POST", "/v1/broadcasts", `{"vchannels":["t/0"]}`, 400, `{"error":{"code":"invalid_argument","message":"type is required","details":{"field":"type"}}}`),
		ex("GET", "/v1/nope", "", 404, `{"error":{"code":"not_found","message":"no route"}}`),
	}
	for _, x := range good {
		if err := s.Check(x); err != nil {
			t.Errorf("faithful exchange %s %s reported: %v", x.Request.Method, x.Request.URL, err)
		}
	}
	drift := map[string]*Exchange{
		"undeclared status":        ex("GET", "/v1/version", "", 418, `{"error":{"code":"teapot","message":"x"}}`),
		"unknown field":            ex("GET", "/v1/version", "", 200, `{"version":"v","go_version":"go1","extra":true}`),
		"wrong type":               ex("GET", "/v1/version", "", 200, `{"version":1,"go_version":"go1"}`),
		"missing required field":   ex("GET", "/v1/version", "", 200, `{"version":"v"}`),
		"error code not listed":    ex("GET", "/v1/version", "", 403, `{"error":{"code":"not_found","message":"x"}}`),
		"error not in error shape": ex("GET", "/v1/version", "", 403, `forbidden`),
		"integer above 2^53-1":     ex("GET", "/v1/channels/t/0", "", 200, `{"vchannel":"t/0","min":0,"max":9007199254740993}`),
		"tick as a number":         ex("GET", "/v1/channels/t/0/messages", "", 200, strings.Replace(readOK, tick, "17", 1)),
		"invalid request accepted": ex("POST", "/v1/broadcasts", `{"vchannels":["t/0"]}`, 200, `{"id":1,"duplicate":false,"state":"TOMBSTONE"}`),
		"unknown route answered":   ex("GET", "/v1/nope", "", 200, `{}`),
		"null list":                ex("GET", "/v1/topics", "", 200, `{"items":null,"next_page_token":""}`),
	}
	for name, x := range drift {
		if err := s.Check(x); err == nil {
			t.Errorf("%s: not reported", name)
		} else {
			t.Logf("%s: %v", name, err)
		}
	}

	// Handler reports drift of a real exchange to the test.
	rep := &fakeReporter{}
	inner := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"version":"v"}`))
	})
	h := s.Handler(rep, true, inner)
	h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("GET", "/v1/version", nil))
	if len(rep.msgs) != 1 || !strings.Contains(rep.msgs[0], "go_version") {
		t.Errorf("Handler reported %q, want one report naming go_version", rep.msgs)
	}
	// Not strict: a test's own route is not checked.
	rep.msgs = nil
	s.Handler(rep, false, inner).ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("GET", "/test/route", nil))
	if len(rep.msgs) != 0 {
		t.Errorf("non-strict Handler reported a route the spec does not have: %q", rep.msgs)
	}
}

type fakeReporter struct{ msgs []string }

func (f *fakeReporter) Errorf(format string, args ...any) {
	f.msgs = append(f.msgs, fmt.Sprintf(format, args...))
}

func TestUnsafeIntegers(t *testing.T) {
	for doc, bad := range map[string]bool{
		`{"a":9007199254740991}`:             false,
		`{"a":-9007199254740991}`:            false,
		`{"a":"9007199254740993"}`:           false,
		`{"a":[1,2,{"b":9007199254740992}]}`: true,
		`{"a":-9007199254740992}`:            true,
		`{"a":1e300}`:                        true,
		`{"a":0.5}`:                          false,
		`[18446744073709551615]`:             true,
	} {
		if err := UnsafeIntegers([]byte(doc)); (err != nil) != bad {
			t.Errorf("UnsafeIntegers(%s) = %v, want bad=%v", doc, err, bad)
		}
	}
}

package host

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"sort"
	"strconv"
	"testing"

	"github.com/hostd-dev/hostd/client"
	"github.com/hostd-dev/hostd/host/config"
	"github.com/hostd-dev/hostd/internal/apispec"
	"github.com/hostd-dev/hostd/wire"
)

// specCheck wraps a test daemon's API so that every exchange of the test
// is checked against docs/openapi.json (internal/apispec): the test fails
// on any answer the reference does not describe.
func specCheck(t *testing.T) func(http.Handler) http.Handler {
	s := apispec.MustLoad()
	return func(h http.Handler) http.Handler { return s.Handler(t, true, h) }
}

// TestRoutesMatchSpec: every route the daemon registers is an operation
// of docs/openapi.json with the same required role, and every operation
// of the spec is a route of the daemon.
func TestRoutesMatchSpec(t *testing.T) {
	h := startHost(t, testConfig(t))
	spec := apispec.MustLoad()
	inSpec := map[string]string{}
	for _, op := range spec.Ops() {
		inSpec[op.Route] = op.Role
	}
	served := map[string]string{}
	for _, r := range h.API().Routes() {
		served[r.Pattern] = r.Role.String()
	}
	var problems []string
	for p, role := range served {
		switch sr, ok := inSpec[p]; {
		case !ok:
			problems = append(problems, p+": served, but not in docs/openapi.json (add the operation, with x-hostd-route and x-hostd-role)")
		case sr != role:
			problems = append(problems, p+": role "+role+" on the server, "+sr+" in docs/openapi.json")
		}
	}
	for p := range inSpec {
		if _, ok := served[p]; !ok {
			problems = append(problems, p+": in docs/openapi.json, but the daemon serves no such route")
		}
	}
	sort.Strings(problems)
	for _, p := range problems {
		t.Error(p)
	}
}

// TestAnswersKeepIntegersSafe drives a real daemon through broadcasts,
// appends, reads, topic changes and translations, and scans each raw
// answer for integers above 2^53-1 (JavaScript and jq round them): time
// ticks come as strings and parse back to the exact tick.
func TestAnswersKeepIntegersSafe(t *testing.T) {
	cfg := testConfig(t)
	cfg.Mapping.Brokers = []config.MappingBroker{{Name: "a"}, {Name: "b"}}
	h := startHost(t, cfg)
	c, err := client.New(h.URL())
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := c.CreateTopic(ctx, &client.TopicRequest{Topic: "ints", Queues: 2, Retention: &client.Retention{MaxAge: "8760h", MaxBytes: 1 << 40}}); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3; i++ {
		if _, err := c.AppendChannel(ctx, "ints/0", &client.AppendRequest{Records: []client.ChannelRecord{{PayloadText: "m"}}}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.RemapTopic(ctx, "ints", &client.TopicRequest{Brokers: []string{"b"}}); err != nil {
		t.Fatal(err)
	}
	res, err := c.SubmitBroadcast(ctx, &client.BroadcastRequest{Type: "noop", VChannels: []string{"ints/0", "ints/1"}})
	if err != nil || len(res.Appends) == 0 {
		t.Fatalf("broadcast: %+v %v", res, err)
	}
	if _, err := c.CommitGroupOffset(ctx, "g", "ints/0", 1); err != nil {
		t.Fatal(err)
	}

	var ticks int
	raw := func(method, path string) []byte {
		t.Helper()
		resp, err := c.Raw(ctx, method, path, nil, "")
		if err != nil {
			t.Fatalf("%s %s: %v", method, path, err)
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		if err := apispec.UnsafeIntegers(b); err != nil {
			t.Errorf("%s %s: %v\n%.500s", method, path, err, b)
		}
		ticks += checkTicks(t, path, b)
		return b
	}
	raw("GET", "/v1/channels/ints/0/messages?from=0")
	raw("GET", "/v1/channels/ints/0")
	raw("GET", "/v1/topics/ints")
	raw("GET", "/v1/topics")
	raw("GET", "/v1/topics/ints/offsets")
	raw("GET", "/v1/topics/ints/queues/0/translate?logic_offset=1")
	raw("GET", "/v1/broadcasts/"+strconv.FormatUint(res.ID, 10))
	raw("GET", "/v1/broadcasts")
	raw("GET", "/v1/groups/g/lag?topic=ints")
	raw("GET", "/v1/version")
	raw("GET", "/v1/plugins")
	raw("GET", "/v1/locks")
	if ticks < 5 {
		t.Fatalf("saw %d time ticks; the scenario should have shown them", ticks)
	}

	// A retention above 2^53-1 bytes would come back as an unsafe integer:
	// it is refused at create.
	_, err = c.CreateTopic(ctx, &client.TopicRequest{Topic: "huge", Queues: 1, Retention: &client.Retention{MaxBytes: 1 << 60}})
	var ae *client.Error
	if !asAPIError(err, &ae) || ae.Code != "invalid_argument" || ae.Details["field"] != "retention.max_bytes" {
		t.Fatalf("max_bytes 2^60: %v", err)
	}
}

func asAPIError(err error, out **client.Error) bool {
	e, ok := err.(*client.Error)
	if ok {
		*out = e
	}
	return ok
}

// checkTicks finds time_tick, first_tick and last_tick in a JSON answer:
// each must be a string of digits above 2^53 (a real Unix-nanosecond
// tick). It returns how many it saw.
func checkTicks(t *testing.T, path string, b []byte) int {
	t.Helper()
	var v any
	if err := json.Unmarshal(b, &v); err != nil {
		return 0
	}
	n := 0
	var walk func(k string, v any)
	walk = func(k string, v any) {
		switch v := v.(type) {
		case map[string]any:
			for k, e := range v {
				walk(k, e)
			}
		case []any:
			for _, e := range v {
				walk(k, e)
			}
		default:
			if k != "time_tick" && k != "first_tick" && k != "last_tick" {
				return
			}
			n++
			s, ok := v.(string)
			tick, err := strconv.ParseUint(s, 10, 64)
			if !ok || err != nil || tick <= wire.MaxSafeInteger {
				t.Errorf("%s: %s = %#v, want a string of the tick's digits (above 2^53)", path, k, v)
			}
		}
	}
	walk("", v)
	return n
}

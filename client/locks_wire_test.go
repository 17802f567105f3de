package client

import (
	"bytes"
	"encoding/json"
	"reflect"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/hostd-dev/hostd/builtin/locks"
	"github.com/hostd-dev/hostd/host/api"
)

// The client keeps its own copies of the lock and presence wire types
// (it may not import host/, see docs/contributing.md "Wire types"). This
// test proves each copy speaks the server's JSON: for every pair, with
// every field of both sides set,
//
//   - both sides have the same JSON fields (paths), except the listed
//     one-sided ones;
//   - the server's JSON decodes into the client type with no unknown field
//     and re-encodes to the same JSON (answers: nothing is lost);
//   - for requests, the client's JSON decodes into the server type with
//     DisallowUnknownFields, as the API does.
//
// A field added on one side only fails here.
func TestLockWireTypesInSync(t *testing.T) {
	type pair struct {
		name     string
		server   any // pointer to the server's type
		client   any // pointer to the client's type
		request  bool
		oneSided []string // JSON paths present on one side only, with why
	}
	// LockKey is shared by requests and answers; its fence is answer-only.
	keyFence := "keys[].fence"
	pairs := []pair{
		{name: "acquire request", server: &api.AcquireLockRequest{}, client: &AcquireLock{}, request: true, oneSided: []string{keyFence}},
		{name: "grant", server: &api.LockGrant{}, client: &LockGrant{}},
		{name: "grant list", server: &api.List[api.LockGrant]{}, client: &List[LockGrant]{}},
		{name: "renew/release request", server: &api.LockTokenRequest{}, client: &lockTokenBody{}, request: true},
		{name: "inspect answer", server: &api.LockKeyState{}, client: &LockKeyState{}},
		{name: "check-fence request", server: &api.CheckFenceRequest{}, client: &checkFenceBody{}, request: true},
		{name: "force-release request", server: &api.ForceReleaseRequest{}, client: &forceReleaseBody{}, request: true},
		{name: "force-release answer", server: &api.ForceReleaseResponse{}, client: &ForceReleaseResult{}, oneSided: []string{"audit[].key.fence"}},
		{name: "audit list", server: &api.List[locks.AuditRecord]{}, client: &List[LockAudit]{}, oneSided: []string{"items[].key.fence"}},
		{name: "announce request", server: &api.AnnounceRequest{}, client: &announceBody{}, request: true},
		{name: "announce answer", server: &api.AnnounceResponse{}, client: &PresenceEntry{}},
		{name: "who answer", server: &api.List[locks.PresenceEntry]{}, client: &List[PresenceEntry]{}, oneSided: []string{"items[].token"}},
		{name: "withdraw request", server: &api.WithdrawRequest{}, client: &withdrawBody{}, request: true},
	}
	for _, p := range pairs {
		t.Run(p.name, func(t *testing.T) {
			fillAll(reflect.ValueOf(p.server).Elem())
			fillAll(reflect.ValueOf(p.client).Elem())
			sj, cj := mustJSON(t, p.server), mustJSON(t, p.client)

			sp, cp := jsonPaths(t, sj), jsonPaths(t, cj)
			var diff []string
			for path := range sp {
				if !cp[path] {
					diff = append(diff, path+" (server only)")
				}
			}
			for path := range cp {
				if !sp[path] {
					diff = append(diff, path+" (client only)")
				}
			}
			sort.Strings(diff)
			var unexpected []string
			for _, d := range diff {
				if !slices.Contains(p.oneSided, strings.Fields(d)[0]) {
					unexpected = append(unexpected, d)
				}
			}
			if len(unexpected) > 0 {
				t.Errorf("fields out of sync: %v", unexpected)
			}

			// Server JSON -> client type -> JSON loses nothing.
			fresh := reflect.New(reflect.TypeOf(p.client).Elem()).Interface()
			if err := strictDecode(sj, fresh); err != nil {
				t.Fatalf("server JSON does not decode into %T: %v\n%s", p.client, err, sj)
			}
			if back := mustJSON(t, fresh); !jsonEqual(t, sj, back) {
				t.Errorf("server JSON through %T changed:\n%s", p.client, cmp.Diff(string(sj), string(back)))
			}
			if !p.request {
				return
			}
			// Client request JSON is accepted by the server's decoder
			// (DisallowUnknownFields), after clearing answer-only fields.
			if p.name == "acquire request" {
				for i := range p.client.(*AcquireLock).Keys {
					p.client.(*AcquireLock).Keys[i].Fence = 0
				}
				cj = mustJSON(t, p.client)
			}
			srv := reflect.New(reflect.TypeOf(p.server).Elem()).Interface()
			if err := strictDecode(cj, srv); err != nil {
				t.Fatalf("client request JSON is rejected by %T: %v\n%s", p.server, err, cj)
			}
			if back := mustJSON(t, srv); !jsonEqual(t, cj, back) {
				t.Errorf("client JSON through %T changed:\n%s", p.server, cmp.Diff(string(cj), string(back)))
			}
		})
	}
}

var timeType = reflect.TypeFor[time.Time]()

// fillAll sets every exported field reachable from v to a non-zero value
// (one element per slice and map), so omitempty hides nothing.
func fillAll(v reflect.Value) {
	switch v.Kind() {
	case reflect.String:
		v.SetString("x")
	case reflect.Bool:
		v.SetBool(true)
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		v.SetInt(7)
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		v.SetUint(7)
	case reflect.Float32, reflect.Float64:
		v.SetFloat(1.5)
	case reflect.Pointer:
		v.Set(reflect.New(v.Type().Elem()))
		fillAll(v.Elem())
	case reflect.Slice:
		s := reflect.MakeSlice(v.Type(), 1, 1)
		fillAll(s.Index(0))
		v.Set(s)
	case reflect.Map:
		m := reflect.MakeMap(v.Type())
		k, e := reflect.New(v.Type().Key()).Elem(), reflect.New(v.Type().Elem()).Elem()
		fillAll(k)
		fillAll(e)
		m.SetMapIndex(k, e)
		v.Set(m)
	case reflect.Interface:
		v.Set(reflect.ValueOf("x"))
	case reflect.Struct:
		if v.Type() == timeType {
			v.Set(reflect.ValueOf(time.Date(2026, 1, 2, 3, 4, 5, 6, time.UTC)))
			return
		}
		for i := 0; i < v.NumField(); i++ {
			if v.Type().Field(i).IsExported() {
				fillAll(v.Field(i))
			}
		}
	}
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func strictDecode(b []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	return dec.Decode(v)
}

func jsonEqual(t *testing.T, a, b []byte) bool {
	t.Helper()
	var x, y any
	if err := json.Unmarshal(a, &x); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &y); err != nil {
		t.Fatal(err)
	}
	return reflect.DeepEqual(x, y)
}

// jsonPaths lists the object keys of a JSON document as dotted paths,
// arrays as "[]" ("keys[].fence"); map keys filled by fillAll ("x") stay
// visible as ".x".
func jsonPaths(t *testing.T, b []byte) map[string]bool {
	t.Helper()
	var v any
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	var walk func(prefix string, v any)
	walk = func(prefix string, v any) {
		switch v := v.(type) {
		case map[string]any:
			for k, e := range v {
				p := k
				if prefix != "" {
					p = prefix + "." + k
				}
				out[p] = true
				walk(p, e)
			}
		case []any:
			for _, e := range v {
				walk(prefix+"[]", e)
			}
		}
	}
	walk("", v)
	return out
}

package apispec

import (
	"encoding/json"
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"reflect"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/getkin/kin-openapi/openapi3"

	"github.com/hostd-dev/hostd/wire"
)

// wireTypes is every struct type of package wire (TestSchemasMatchWire
// checks this list against the package's source, so a new type cannot be
// forgotten).
var wireTypes = []any{
	wire.ErrorResponse{}, wire.Error{}, wire.Version{}, wire.Status{}, wire.ResourceKey{},
	wire.Scope{}, wire.BroadcastRequest{}, wire.Checkpoint{}, wire.BroadcastResult{}, wire.Message{},
	wire.VChannelStatus{}, wire.Abandon{}, wire.BroadcastTask{}, wire.AckRequest{}, wire.AbandonRequest{},
	wire.BroadcastLock{}, wire.BroadcastLockHolder{}, wire.BroadcastLockWaiter{},
	wire.ChannelMessage{}, wire.ReadResult{}, wire.AppendRecord{}, wire.AppendRequest{}, wire.Position{}, wire.AppendResult{},
	wire.RetentionRequest{}, wire.TopicRequest{}, wire.TopicChange{}, wire.Retention{}, wire.Topic{}, wire.Segment{},
	wire.SegmentInfo{}, wire.QueueInfo{}, wire.TopicInfo{}, wire.QueueOffsets{}, wire.GroupOffset{},
	wire.CommitOffsetRequest{}, wire.Translation{},
	wire.LockKey{}, wire.AcquireLockRequest{}, wire.LockGrant{}, wire.LockHolder{}, wire.LockWaiter{}, wire.LockKeyState{},
	wire.LockTokenRequest{}, wire.ReleaseResult{}, wire.CheckFenceRequest{}, wire.CheckFenceResult{},
	wire.ForceReleaseRequest{}, wire.AuditKey{}, wire.AuditRecord{}, wire.ForceReleaseResult{},
	wire.AnnounceRequest{}, wire.PresenceEntry{}, wire.WithdrawRequest{}, wire.WithdrawResult{},
	wire.Plugin{}, wire.PluginRegistration{}, wire.PluginLoadError{}, wire.PluginReload{}, wire.PluginReloadMember{}, wire.PluginKV{},
	wire.KVFence{}, wire.PluginKVPutRequest{}, wire.PluginKVDeleted{},
	wire.Cluster{}, wire.ClusterLeader{}, wire.ClusterMember{},
	wire.TraceSummary{}, wire.TracePage{}, wire.Trace{}, wire.TraceMember{},
}

// Types that exist in wire but are no schema of their own: Segment is
// embedded in SegmentInfo (its fields are SegmentInfo's), Tick is the
// "Tick" string schema.
var notSchemas = map[string]bool{"Segment": true}

// TestSchemasMatchWire compares every schema of the spec with the Go type
// of the same name in package wire, by reflection: the same JSON
// properties, each of the JSON type the Go type encodes to (a Tick is the
// Tick string schema, a time a date-time string, []byte a base64 string,
// a struct a $ref to its schema), and — for answers — required exactly
// when the field is not omitempty. Every schema is a wire type and every
// wire type a schema ("<T>List" for wire.List[T]).
func TestSchemasMatchWire(t *testing.T) {
	s := MustLoad()
	schemas := s.Doc().Components.Schemas

	// The list above is every struct type declared in wire/.
	declared := wireStructNames(t)
	var listed []string
	byName := map[string]reflect.Type{}
	for _, v := range wireTypes {
		rt := reflect.TypeOf(v)
		listed = append(listed, rt.Name())
		byName[rt.Name()] = rt
	}
	sort.Strings(listed)
	if !slices.Equal(declared, listed) {
		t.Fatalf("wireTypes is out of date:\n declared in wire/: %v\n listed here:       %v", declared, listed)
	}

	requests := requestSchemas(s)
	for name, rt := range byName {
		if notSchemas[name] {
			if schemas[name] != nil {
				t.Errorf("%s is embedded, not a schema of its own", name)
			}
			continue
		}
		sr := schemas[name]
		if sr == nil || sr.Value == nil {
			t.Errorf("wire.%s has no schema in docs/openapi.json", name)
			continue
		}
		compareStruct(t, name, rt, sr.Value, requests[name])
	}
	for name, sr := range schemas {
		switch {
		case name == "Tick":
			if !sr.Value.Type.Is("string") || sr.Value.Pattern != "^[0-9]+$" {
				t.Errorf("Tick must be a string of digits, is %v %q", sr.Value.Type, sr.Value.Pattern)
			}
		case strings.HasSuffix(name, "List"):
			item := strings.TrimSuffix(name, "List")
			if byName[item] == nil {
				t.Errorf("schema %s: no wire type %s", name, item)
				continue
			}
			compareStruct(t, name, reflect.TypeOf(wire.List[struct{}]{}), sr.Value, false)
			items := sr.Value.Properties["items"]
			if items == nil || items.Value.Items == nil || refName(items.Value.Items) != item {
				t.Errorf("schema %s: items must be an array of %s", name, item)
			}
		case byName[name] == nil:
			t.Errorf("schema %s matches no type of package wire", name)
		}
	}
}

// compareStruct compares struct type rt with object schema sc.
func compareStruct(t *testing.T, name string, rt reflect.Type, sc *openapi3.Schema, request bool) {
	t.Helper()
	if !sc.Type.Is("object") {
		t.Errorf("%s: schema type %v, want object", name, sc.Type)
		return
	}
	if sc.AdditionalProperties.Has == nil || *sc.AdditionalProperties.Has {
		t.Errorf("%s: want additionalProperties: false (an unknown field is drift)", name)
	}
	fields := jsonFields(rt)
	for jn, f := range fields {
		p := sc.Properties[jn]
		if p == nil {
			t.Errorf("%s: field %s (%s) is not in the schema", name, jn, f.Name)
			continue
		}
		if name != "" && strings.HasSuffix(name, "List") && jn == "items" {
			continue // checked by the caller
		}
		if want, got := goKind(f.Type), schemaKind(p); want != got {
			t.Errorf("%s.%s: Go %s encodes as %s, the schema says %s", name, jn, f.Type, want, got)
		}
		omit := strings.Contains(f.Tag.Get("json"), ",omitempty") || strings.Contains(f.Tag.Get("json"), ",omitzero")
		req := slices.Contains(sc.Required, jn)
		if !request && !omit && !req {
			t.Errorf("%s.%s: always present in answers, the schema must list it as required", name, jn)
		}
		if omit && req && !request {
			t.Errorf("%s.%s: omitted when empty, the schema must not require it", name, jn)
		}
	}
	for jn := range sc.Properties {
		if _, ok := fields[jn]; !ok {
			t.Errorf("%s: schema property %s is no field of the Go type", name, jn)
		}
	}
	for _, r := range sc.Required {
		if _, ok := fields[r]; !ok {
			t.Errorf("%s: required %s is no field", name, r)
		}
	}
}

// jsonFields maps JSON names to fields, embedded structs flattened.
func jsonFields(rt reflect.Type) map[string]reflect.StructField {
	out := map[string]reflect.StructField{}
	for i := 0; i < rt.NumField(); i++ {
		f := rt.Field(i)
		if f.Anonymous {
			for k, v := range jsonFields(f.Type) {
				if _, ok := out[k]; !ok {
					out[k] = v
				}
			}
			continue
		}
		if !f.IsExported() {
			continue
		}
		jn, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if jn == "-" {
			continue
		}
		if jn == "" {
			jn = f.Name
		}
		out[jn] = f
	}
	return out
}

var (
	tickType = reflect.TypeFor[wire.Tick]()
	timeType = reflect.TypeFor[time.Time]()
	// rawType is embedded JSON (Trace.otlp, an OTLP-JSON object).
	rawType = reflect.TypeFor[json.RawMessage]()
)

// goKind is what a Go type encodes to: "string", "integer", "boolean",
// "any", "array of <kind>", "object of <kind>", "$ref <Name>".
func goKind(t reflect.Type) string {
	switch {
	case t == tickType:
		return "$ref Tick"
	case t == timeType:
		return "string date-time"
	case t == rawType:
		return "object of any"
	}
	switch t.Kind() {
	case reflect.Pointer:
		return goKind(t.Elem())
	case reflect.String:
		return "string"
	case reflect.Bool:
		return "boolean"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "integer"
	case reflect.Slice:
		if t.Elem().Kind() == reflect.Uint8 {
			return "string base64"
		}
		return "array of " + goKind(t.Elem())
	case reflect.Map:
		return "object of " + goKind(t.Elem())
	case reflect.Interface:
		return "any"
	case reflect.Struct:
		return "$ref " + t.Name()
	}
	return "unsupported " + t.String()
}

func schemaKind(r *openapi3.SchemaRef) string {
	if n := refName(r); n != "" {
		return "$ref " + n
	}
	s := r.Value
	switch {
	case s.Type == nil || len(s.Type.Slice()) == 0:
		return "any"
	case s.Type.Is("string"):
		switch {
		case s.Format == "date-time":
			return "string date-time"
		case s.Extensions["contentEncoding"] == "base64" || contentEncoding(s) == "base64":
			return "string base64"
		}
		return "string"
	case s.Type.Is("integer"):
		return "integer"
	case s.Type.Is("boolean"):
		return "boolean"
	case s.Type.Is("array"):
		if s.Items == nil {
			return "array of any"
		}
		return "array of " + schemaKind(s.Items)
	case s.Type.Is("object"):
		if s.AdditionalProperties.Schema != nil {
			return "object of " + schemaKind(s.AdditionalProperties.Schema)
		}
		return "object of any"
	}
	return "unknown " + strings.Join(s.Type.Slice(), ",")
}

func contentEncoding(s *openapi3.Schema) string {
	return s.ContentEncoding
}

func refName(r *openapi3.SchemaRef) string {
	if r == nil || r.Ref == "" {
		return ""
	}
	return r.Ref[strings.LastIndex(r.Ref, "/")+1:]
}

// requestSchemas names the schemas reachable from a request body only
// (not from any answer): their required lists are the server's checks,
// not the Go omitempty tags.
func requestSchemas(s *Spec) map[string]bool {
	inReq, inResp := map[string]bool{}, map[string]bool{}
	var walk func(r *openapi3.SchemaRef, seen map[string]bool)
	walk = func(r *openapi3.SchemaRef, seen map[string]bool) {
		if r == nil {
			return
		}
		if n := refName(r); n != "" {
			if seen[n] {
				return
			}
			seen[n] = true
		}
		v := r.Value
		if v == nil {
			return
		}
		for _, p := range v.Properties {
			walk(p, seen)
		}
		walk(v.Items, seen)
		walk(v.AdditionalProperties.Schema, seen)
	}
	for _, op := range s.Ops() {
		o := op.Operation()
		if o.RequestBody != nil && o.RequestBody.Value != nil {
			for _, mt := range o.RequestBody.Value.Content {
				walk(mt.Schema, inReq)
			}
		}
		for _, rr := range o.Responses.Map() {
			if rr.Value != nil {
				for _, mt := range rr.Value.Content {
					walk(mt.Schema, inResp)
				}
			}
		}
	}
	out := map[string]bool{}
	for n := range inReq {
		if !inResp[n] {
			out[n] = true
		}
	}
	return out
}

// wireStructNames parses package wire's source for its exported,
// non-generic struct types.
func wireStructNames(t *testing.T) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join("..", "..", "wire", "*.go"))
	if err != nil || len(files) == 0 {
		t.Fatalf("wire sources: %v", err)
	}
	var out []string
	fset := token.NewFileSet()
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		af, err := parser.ParseFile(fset, f, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range af.Decls {
			gd, ok := d.(*ast.GenDecl)
			if !ok || gd.Tok != token.TYPE {
				continue
			}
			for _, sp := range gd.Specs {
				ts := sp.(*ast.TypeSpec)
				if _, ok := ts.Type.(*ast.StructType); ok && ts.Name.IsExported() && ts.TypeParams == nil {
					out = append(out, ts.Name.Name)
				}
			}
		}
	}
	sort.Strings(out)
	return out
}

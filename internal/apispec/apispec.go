package apispec

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"

	"github.com/hostd-dev/hostd/docs"
	"github.com/hostd-dev/hostd/wire"
)

// Op is one operation of the spec.
type Op struct {
	// Method and Path as the spec writes them ("GET",
	// "/v1/plugins/{name}/kv/{key}").
	Method, Path string
	// Route is x-hostd-route: the Go ServeMux pattern host/api registers
	// ("GET /v1/plugins/{name}/kv/{key...}").
	Route string
	// Role is x-hostd-role: public, read, write or admin.
	Role string
	// Paginated is x-hostd-paginated.
	Paginated bool

	item *openapi3.PathItem
	op   *openapi3.Operation
}

// Operation is the parsed operation (kin-openapi).
func (o *Op) Operation() *openapi3.Operation { return o.op }

// Spec is a loaded, validated OpenAPI document with hostd's extensions.
type Spec struct {
	doc *openapi3.T
	ops []*Op
	mux *http.ServeMux // x-hostd-route patterns -> a handler that reports the Op
}

var (
	loadOnce sync.Once
	loaded   *Spec
	loadErr  error
)

// Load parses docs/openapi.json (embedded by package docs) once.
func Load() (*Spec, error) {
	loadOnce.Do(func() { loaded, loadErr = Parse(docs.OpenAPI) })
	return loaded, loadErr
}

// MustLoad is Load for tests: it panics if the embedded spec is invalid
// (TestSpecIsValid reports why).
func MustLoad() *Spec {
	s, err := Load()
	if err != nil {
		panic(err)
	}
	return s
}

var paramRe = regexp.MustCompile(`\{([a-z_]+)(\.\.\.)?\}`)

// Parse loads and validates an OpenAPI 3.1 document and indexes its
// operations by their x-hostd-route.
func Parse(b []byte) (*Spec, error) {
	loader := openapi3.NewLoader()
	doc, err := loader.LoadFromData(b)
	if err != nil {
		return nil, fmt.Errorf("apispec: load: %w", err)
	}
	if !strings.HasPrefix(doc.OpenAPI, "3.1") {
		return nil, fmt.Errorf("apispec: openapi %q, want 3.1.x", doc.OpenAPI)
	}
	if err := doc.Validate(loader.Context); err != nil {
		return nil, fmt.Errorf("apispec: invalid document: %w", err)
	}
	s := &Spec{doc: doc, mux: http.NewServeMux()}
	var errs []error
	for path, item := range doc.Paths.Map() {
		for method, op := range item.Operations() {
			o := &Op{Method: method, Path: path, item: item, op: op}
			o.Route, _ = op.Extensions["x-hostd-route"].(string)
			o.Role, _ = op.Extensions["x-hostd-role"].(string)
			o.Paginated, _ = op.Extensions["x-hostd-paginated"].(bool)
			m, p, _ := strings.Cut(o.Route, " ")
			switch {
			case o.Route == "":
				errs = append(errs, fmt.Errorf("%s %s: no x-hostd-route", method, path))
				continue
			case m != method || paramRe.ReplaceAllString(p, "{$1}") != path:
				errs = append(errs, fmt.Errorf("%s %s: x-hostd-route %q names another route", method, path, o.Route))
				continue
			case !slices.Contains([]string{"public", "read", "write", "admin"}, o.Role):
				errs = append(errs, fmt.Errorf("%s %s: x-hostd-role %q: want public, read, write or admin", method, path, o.Role))
			}
			s.ops = append(s.ops, o)
			s.mux.Handle(o.Route, opHandler{o})
		}
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("apispec: %w", errors.Join(errs...))
	}
	sort.Slice(s.ops, func(i, j int) bool {
		if s.ops[i].Path != s.ops[j].Path {
			return s.ops[i].Path < s.ops[j].Path
		}
		return s.ops[i].Method < s.ops[j].Method
	})
	return s, nil
}

// Doc is the parsed document.
func (s *Spec) Doc() *openapi3.T { return s.doc }

// Ops lists the operations sorted by path, then method.
func (s *Spec) Ops() []*Op { return s.ops }

// opHandler lets the ServeMux (the server's own matcher, so {key...}
// matches as the server does) tell which Op a request is for, with its
// path values.
type opHandler struct{ op *Op }

type matchKey struct{}

type match struct {
	op     *Op
	params map[string]string
}

func (h opHandler) ServeHTTP(_ http.ResponseWriter, r *http.Request) {
	m := r.Context().Value(matchKey{}).(*match)
	m.op = h.op
	m.params = map[string]string{}
	for _, p := range paramRe.FindAllStringSubmatch(h.op.Route, -1) {
		m.params[p[1]] = r.PathValue(p[1])
	}
}

// Find returns the operation r is for and its path parameters, or nil.
func (s *Spec) Find(r *http.Request) (*Op, map[string]string) {
	m := &match{}
	probe := r.Clone(context.WithValue(context.Background(), matchKey{}, m))
	probe.Body = http.NoBody
	if _, pattern := s.mux.Handler(probe); pattern == "" {
		return nil, nil
	}
	s.mux.ServeHTTP(httptest.NewRecorder(), probe)
	return m.op, m.params
}

// Exchange is one request and its response, bodies read in full.
type Exchange struct {
	Request      *http.Request
	RequestBody  []byte
	Status       int
	Header       http.Header
	ResponseBody []byte
	// Truncated: the response body was longer than was kept; it is not
	// checked.
	Truncated bool
}

// ErrUnknownRoute is returned by Check for a request no operation of the
// spec matches.
var ErrUnknownRoute = errors.New("apispec: no operation of the spec matches the request")

// Check holds one exchange to the spec:
//
//   - the response's status is declared for the operation, and its body
//     matches that response's schema (kin-openapi, JSON Schema 2020-12);
//   - an error answer's code is one of the response's x-hostd-codes;
//   - every integer in a JSON answer is at most 2^53-1
//     (wire.MaxSafeInteger);
//   - a request the spec calls invalid is not answered 2xx (the server
//     accepted what the reference says it refuses).
//
// A request that matches no operation returns ErrUnknownRoute (wrapped)
// unless it was answered with the API's error shape as 404, 405 or 401.
func (s *Spec) Check(x *Exchange) error {
	if x.Status == 499 {
		return nil // the client went away: nobody reads this answer
	}
	var problems []string
	if err := checkIntegers(x); err != nil {
		problems = append(problems, err.Error())
	}
	op, params := s.Find(x.Request)
	if op == nil {
		if (x.Status == 404 || x.Status == 405 || x.Status == 401) && isErrorBody(x.ResponseBody) {
			return joinProblems(problems)
		}
		return fmt.Errorf("%w: %s %s answered %d", ErrUnknownRoute, x.Request.Method, x.Request.URL.Path, x.Status)
	}
	ctx := context.Background()
	req := x.Request.Clone(ctx)
	req.Body = io.NopCloser(bytes.NewReader(x.RequestBody))
	req.ContentLength = int64(len(x.RequestBody))
	if len(x.RequestBody) > 0 && req.Header.Get("Content-Type") == "" {
		// The server reads a body without a content type as JSON.
		req.Header.Set("Content-Type", "application/json")
	}
	in := &openapi3filter.RequestValidationInput{
		Request:    req,
		PathParams: params,
		Route:      &routers.Route{Spec: s.doc, Path: op.Path, PathItem: op.item, Method: op.Method, Operation: op.op},
		Options:    &openapi3filter.Options{AuthenticationFunc: openapi3filter.NoopAuthenticationFunc, MultiError: true},
	}
	where := fmt.Sprintf("%s %s (%s)", x.Request.Method, x.Request.URL.RequestURI(), op.Route)
	if err := openapi3filter.ValidateRequest(ctx, in); err != nil && x.Status/100 == 2 {
		problems = append(problems, fmt.Sprintf("the server answered %d to a request the spec calls invalid: %v", x.Status, err))
	}
	resp := &openapi3filter.ResponseValidationInput{
		RequestValidationInput: in,
		Status:                 x.Status,
		Header:                 x.Header,
		Body:                   io.NopCloser(bytes.NewReader(x.ResponseBody)),
		Options:                &openapi3filter.Options{IncludeResponseStatus: true, MultiError: true, ExcludeResponseBody: x.Truncated},
	}
	if err := openapi3filter.ValidateResponse(ctx, resp); err != nil {
		problems = append(problems, fmt.Sprintf("response %d does not match the spec: %v", x.Status, err))
	}
	if x.Status >= 400 {
		if err := checkErrorCode(op, x); err != nil {
			problems = append(problems, err.Error())
		}
	}
	if err := joinProblems(problems); err != nil {
		return fmt.Errorf("%s: %w", where, err)
	}
	return nil
}

func joinProblems(ps []string) error {
	if len(ps) == 0 {
		return nil
	}
	return errors.New(strings.Join(ps, "; "))
}

func isErrorBody(b []byte) bool {
	var e wire.ErrorResponse
	return json.Unmarshal(b, &e) == nil && e.Error != nil && e.Error.Code != ""
}

// checkErrorCode: an error answer's code is listed in the response's
// x-hostd-codes.
func checkErrorCode(op *Op, x *Exchange) error {
	rr := op.op.Responses.Status(x.Status)
	if rr == nil || rr.Value == nil {
		return nil // ValidateResponse reported the undeclared status
	}
	var e wire.ErrorResponse
	if err := json.Unmarshal(x.ResponseBody, &e); err != nil || e.Error == nil {
		return fmt.Errorf("error answer %d is not {\"error\": {...}}: %.200s", x.Status, x.ResponseBody)
	}
	raw, _ := rr.Value.Extensions["x-hostd-codes"].([]any)
	var codes []string
	for _, c := range raw {
		if s, ok := c.(string); ok {
			codes = append(codes, s)
		}
	}
	if !slices.Contains(codes, e.Error.Code) {
		return fmt.Errorf("error code %q is not among the codes the spec lists for %d: %v", e.Error.Code, x.Status, codes)
	}
	return nil
}

// checkIntegers: no integer in a JSON answer above 2^53-1.
func checkIntegers(x *Exchange) error {
	if x.Truncated || !strings.Contains(x.Header.Get("Content-Type"), "json") || len(x.ResponseBody) == 0 {
		return nil
	}
	return UnsafeIntegers(x.ResponseBody)
}

// UnsafeIntegers returns an error naming every number in the JSON document
// b that is an integer above 2^53-1 (or below -(2^53-1)): JavaScript and
// jq would round it. It returns nil for a document without such numbers,
// and an error for invalid JSON.
func UnsafeIntegers(b []byte) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return fmt.Errorf("answer is not JSON: %w", err)
	}
	var bad []string
	var walk func(path string, v any)
	walk = func(path string, v any) {
		switch v := v.(type) {
		case map[string]any:
			for k, e := range v {
				walk(path+"."+k, e)
			}
		case []any:
			for i, e := range v {
				walk(fmt.Sprintf("%s[%d]", path, i), e)
			}
		case json.Number:
			if unsafeInteger(string(v)) {
				bad = append(bad, path+" = "+string(v))
			}
		}
	}
	walk("$", v)
	if len(bad) > 0 {
		sort.Strings(bad)
		return fmt.Errorf("integers above 2^53-1 in the answer (send them as strings): %s", strings.Join(bad, ", "))
	}
	return nil
}

// unsafeInteger reports whether the JSON number literal n has a magnitude
// above 2^53-1 (compared as digits, so no float rounding hides it).
func unsafeInteger(n string) bool {
	n = strings.TrimPrefix(n, "-")
	if strings.ContainsAny(n, ".eE") {
		// A fraction or exponent: compare as float (2^53 is exact).
		var f float64
		if _, err := fmt.Sscan(n, &f); err != nil {
			return false
		}
		return f > wire.MaxSafeInteger
	}
	const max = "9007199254740991"
	n = strings.TrimLeft(n, "0")
	return len(n) > len(max) || (len(n) == len(max) && n > max)
}

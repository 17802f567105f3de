package api

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	tracenoop "go.opentelemetry.io/otel/trace/noop"

	"github.com/hostd-dev/hostd/runtime/sched"
	"github.com/hostd-dev/hostd/wire"
)

// HandlerFunc handles one API request. It writes a response and returns nil,
// or returns an error (an *Error, or an error a registered ErrorMapper
// knows, else it becomes 500 internal) without writing anything.
type HandlerFunc func(w http.ResponseWriter, r *http.Request) error

// Options configure a Server. Zero durations and sizes take the defaults of
// host/config (30s timeout, 4 MiB body, ...).
type Options struct {
	// Listen is the TCP address, e.g. "127.0.0.1:7070" or "127.0.0.1:0".
	Listen string
	// TLSCertFile and TLSKeyFile serve HTTPS when both are set.
	TLSCertFile, TLSKeyFile string
	// Tokens enable bearer-token auth; empty means no auth (then Listen
	// must be a loopback address).
	Tokens []Token
	// RequestTimeout is the default deadline of a request's context.
	RequestTimeout time.Duration
	// MaxBodyBytes limits request bodies.
	MaxBodyBytes int64
	// ReadHeaderTimeout and IdleTimeout configure the http.Server.
	ReadHeaderTimeout, IdleTimeout time.Duration
	// Logger receives request and error logs. Default: discard.
	Logger *slog.Logger
	// TracerProvider makes one SERVER span per request (W3C traceparent
	// from the caller is honored). Default: no-op.
	TracerProvider trace.TracerProvider
	// MeterProvider records request metrics. Default: no-op.
	MeterProvider metric.MeterProvider
	// Metrics is served at GET /metrics (role read). Nil: no /metrics.
	Metrics http.Handler
	// Version is served at GET /v1/version.
	Version VersionInfo
	// Ready reports what is not ready yet; an empty result means ready.
	// Nil means always ready. Served at GET /readyz.
	Ready func() []string
	// Clock decides when a token has expired (Token.ExpiresAt). Default
	// sched.Real.
	Clock sched.Clock
	// Wrap, if set, wraps the server's whole handler (tests: check every
	// exchange against docs/openapi.json, internal/apispec).
	Wrap func(http.Handler) http.Handler
	// Fallback, if set, serves every request no registered route matches,
	// with no auth, limits or spans of this server (a cluster replica's
	// front server hands them to the leader term's API, local or
	// forwarded, which does all that itself).
	Fallback http.Handler
}

// VersionInfo describes the running binary (GET /v1/version).
type VersionInfo = wire.Version

// ErrInsecureListen is returned by New for a non-loopback Listen address
// without tokens.
var ErrInsecureListen = errors.New("api: refusing to listen on a non-loopback address without tokens")

// Route describes one registered operation (for docs and tests).
type Route struct {
	Method  string
	Path    string
	Role    Role
	Pattern string
}

// RouteOption adjusts one route.
type RouteOption func(*route)

type route struct {
	timeout  time.Duration // <0: none
	untraced bool
}

// WithoutTrace serves a route without a span: probes and scrapes
// (/healthz, /readyz, /metrics) arrive every few seconds and would bury
// the broadcasts in the trace files. The route still gets metrics and logs.
func WithoutTrace() RouteOption { return func(r *route) { r.untraced = true } }

// WithTimeout overrides the request timeout of one route (e.g. a long poll).
// d < 0 means no deadline (streams such as backups); the client's
// disconnect still cancels the context.
func WithTimeout(d time.Duration) RouteOption { return func(r *route) { r.timeout = d } }

// Server is hostd's HTTP API. Features register routes with Handle before
// Start; the server adds auth, limits, timeouts, tracing, metrics, panic
// recovery and the error shape around every handler.
type Server struct {
	opts   Options
	log    *slog.Logger
	auth   *authenticator
	mux    *http.ServeMux
	tracer trace.Tracer
	prop   propagation.TextMapPropagator

	duration metric.Float64Histogram
	inflight metric.Int64UpDownCounter

	mu       sync.RWMutex
	routes   []Route
	patterns map[string]struct{} // registered patterns, for ServeHTTP
	mappers  []ErrorMapper
	started  bool

	srv      *http.Server
	ln       net.Listener
	serveErr chan error
	closing  atomic.Bool
	shutOnce sync.Once
	shutErr  error
}

// New builds a Server and registers /healthz, /readyz, /metrics and
// /v1/version.
func New(opts Options) (*Server, error) {
	if opts.RequestTimeout <= 0 {
		opts.RequestTimeout = 30 * time.Second
	}
	if opts.MaxBodyBytes <= 0 {
		opts.MaxBodyBytes = 4 << 20
	}
	if opts.ReadHeaderTimeout <= 0 {
		opts.ReadHeaderTimeout = 10 * time.Second
	}
	if opts.IdleTimeout <= 0 {
		opts.IdleTimeout = 2 * time.Minute
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.TracerProvider == nil {
		opts.TracerProvider = tracenoop.NewTracerProvider()
	}
	if opts.MeterProvider == nil {
		opts.MeterProvider = metricnoop.NewMeterProvider()
	}
	if opts.Listen == "" {
		opts.Listen = "127.0.0.1:7070"
	}
	if opts.Clock == nil {
		opts.Clock = sched.Real
	}
	host, _, err := net.SplitHostPort(opts.Listen)
	if err != nil {
		return nil, fmt.Errorf("api: listen address %q: %w", opts.Listen, err)
	}
	if len(opts.Tokens) == 0 && !isLoopback(host) {
		return nil, fmt.Errorf("%w %q: anyone who can reach it could read and change state; configure api.tokens or listen on 127.0.0.1", ErrInsecureListen, opts.Listen)
	}
	if (opts.TLSCertFile == "") != (opts.TLSKeyFile == "") {
		return nil, errors.New("api: TLS needs both a certificate and a key file")
	}
	s := &Server{
		opts:   opts,
		log:    opts.Logger,
		auth:   newAuthenticator(opts.Tokens, opts.Clock),
		mux:    http.NewServeMux(),
		tracer: opts.TracerProvider.Tracer("github.com/hostd-dev/hostd/host/api"),
		prop:   propagation.TraceContext{},
	}
	meter := opts.MeterProvider.Meter("github.com/hostd-dev/hostd/host/api")
	s.duration, err = meter.Float64Histogram("http.server.request.duration",
		metric.WithUnit("s"), metric.WithDescription("Duration of HTTP API requests."),
		metric.WithExplicitBucketBoundaries(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30))
	if err != nil {
		return nil, fmt.Errorf("api: metrics: %w", err)
	}
	s.inflight, err = meter.Int64UpDownCounter("http.server.active_requests",
		metric.WithUnit("{request}"), metric.WithDescription("HTTP API requests in flight."))
	if err != nil {
		return nil, fmt.Errorf("api: metrics: %w", err)
	}
	s.registerBuiltins()
	s.auth.warnExpiring(s.log)
	return s, nil
}

func isLoopback(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// Handle registers h for pattern ("METHOD /v1/path/{name}", Go ServeMux
// syntax; the method is required) requiring role. It panics on a malformed
// or duplicate pattern, or after Start: those are programming errors found
// by any test that builds the server.
func (s *Server) Handle(pattern string, role Role, h HandlerFunc, opts ...RouteOption) {
	method, path, ok := strings.Cut(pattern, " ")
	if !ok || method == "" || !strings.HasPrefix(path, "/") {
		panic(fmt.Sprintf("api: Handle(%q): pattern must be \"METHOD /path\"", pattern))
	}
	var rt route
	for _, o := range opts {
		o(&rt)
	}
	s.mu.Lock()
	if s.started {
		s.mu.Unlock()
		panic(fmt.Sprintf("api: Handle(%q) after Start", pattern))
	}
	s.routes = append(s.routes, Route{Method: method, Path: path, Role: role, Pattern: pattern})
	if s.patterns == nil {
		s.patterns = make(map[string]struct{})
	}
	s.patterns[pattern] = struct{}{}
	s.mu.Unlock()
	s.mux.Handle(pattern, s.wrap(pattern, role, rt, h))
}

// MapErrors registers a mapper from a feature's errors to API errors.
// Mappers are tried in registration order for errors that are not *Error.
func (s *Server) MapErrors(m ErrorMapper) {
	s.mu.Lock()
	s.mappers = append(s.mappers, m)
	s.mu.Unlock()
}

// Routes returns the registered routes sorted by path then method.
func (s *Server) Routes() []Route {
	s.mu.RLock()
	out := slices.Clone(s.routes)
	s.mu.RUnlock()
	slices.SortFunc(out, func(a, b Route) int {
		if c := strings.Compare(a.Path, b.Path); c != 0 {
			return c
		}
		return strings.Compare(a.Method, b.Method)
	})
	return out
}

// AuthEnabled reports whether tokens are required.
func (s *Server) AuthEnabled() bool { return s.auth.enabled() }

// ServeHTTP serves one request (the http.Server's handler; tests may call
// it directly).
//
// With tokens on, a request under /v1/ that matches no registered route
// (404, 405, or a path the mux would redirect) is authenticated before it
// is answered: an unauthenticated caller gets 401 for every /v1/ path, so
// the routes cannot be enumerated without a token.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	_, pattern := s.mux.Handler(r)
	if s.opts.Fallback != nil && !s.isRoute(pattern) {
		s.opts.Fallback.ServeHTTP(w, r)
		return
	}
	if !s.isRoute(pattern) && s.auth.enabled() && isAPIPath(r.URL.Path) {
		if _, aerr := s.auth.authorize(r, RoleRead); aerr != nil {
			WriteError(w, aerr)
			return
		}
	}
	if pattern == "" {
		s.noRoute(w, r)
		return
	}
	s.mux.ServeHTTP(w, r)
}

// isRoute reports whether pattern is one registered with Handle (the mux
// also returns patterns for its own redirects).
func (s *Server) isRoute(pattern string) bool {
	if pattern == "" {
		return false
	}
	s.mu.RLock()
	_, ok := s.patterns[pattern]
	s.mu.RUnlock()
	return ok
}

// isAPIPath reports whether p is under /v1 (the authenticated API).
func isAPIPath(p string) bool { return p == "/v1" || strings.HasPrefix(p, "/v1/") }

// noRoute answers 404 or 405 in the API's error shape.
func (s *Server) noRoute(w http.ResponseWriter, r *http.Request) {
	var allow []string
	for _, m := range []string{"GET", "POST", "PUT", "PATCH", "DELETE"} {
		if m == r.Method {
			continue
		}
		probe := r.Clone(r.Context())
		probe.Method = m
		if _, p := s.mux.Handler(probe); p != "" {
			allow = append(allow, m)
		}
	}
	if len(allow) > 0 {
		w.Header().Set("Allow", strings.Join(allow, ", "))
		WriteError(w, Errorf(http.StatusMethodNotAllowed, CodeMethodNotAllowed,
			"method %s is not allowed on %s (allowed: %s)", r.Method, r.URL.Path, strings.Join(allow, ", ")))
		return
	}
	WriteError(w, NotFound("no route %s %s", r.Method, r.URL.Path))
}

// Listen binds the listen address (and loads the TLS certificate) without
// serving yet, so that a busy port or a bad certificate fails before
// anything else starts. Start calls it if it has not been called.
func (s *Server) Listen() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ln != nil {
		return nil
	}
	ln, err := net.Listen("tcp", s.opts.Listen)
	if err != nil {
		return fmt.Errorf("api: listen on %s: %w", s.opts.Listen, err)
	}
	if s.opts.TLSCertFile != "" {
		cert, err := tls.LoadX509KeyPair(s.opts.TLSCertFile, s.opts.TLSKeyFile)
		if err != nil {
			ln.Close()
			return fmt.Errorf("api: load TLS certificate %s / key %s: %w", s.opts.TLSCertFile, s.opts.TLSKeyFile, err)
		}
		ln = tls.NewListener(ln, &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12})
	}
	s.ln = ln
	return nil
}

// Start binds the listen address (unless Listen did) and serves in the
// background. It returns once the socket is bound (so Addr is valid), or
// the bind error. No route may be added after Start.
func (s *Server) Start() error {
	s.mu.Lock()
	if s.started {
		s.mu.Unlock()
		return errors.New("api: server already started")
	}
	s.started = true
	s.mu.Unlock()

	if err := s.Listen(); err != nil {
		return err
	}
	s.mu.RLock()
	ln := s.ln
	s.mu.RUnlock()
	var handler http.Handler = s
	if s.opts.Wrap != nil {
		handler = s.opts.Wrap(s)
	}
	s.srv = &http.Server{
		Handler:           handler,
		ReadHeaderTimeout: s.opts.ReadHeaderTimeout,
		IdleTimeout:       s.opts.IdleTimeout,
		MaxHeaderBytes:    1 << 20,
		ErrorLog:          slog.NewLogLogger(s.log.Handler(), slog.LevelWarn),
	}
	s.serveErr = make(chan error, 1)
	go func() {
		err := s.srv.Serve(ln)
		if errors.Is(err, http.ErrServerClosed) {
			err = nil
		}
		s.serveErr <- err
	}()
	s.log.Info("api listening", "addr", ln.Addr().String(), "tls", s.opts.TLSCertFile != "", "auth", s.auth.enabled())
	return nil
}

// Addr is the bound address (after Start), e.g. to learn port 0's port.
func (s *Server) Addr() net.Addr {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.ln == nil {
		return nil
	}
	return s.ln.Addr()
}

// URL is the base URL of the bound server, e.g. "http://127.0.0.1:7070".
func (s *Server) URL() string {
	addr := s.Addr()
	if addr == nil {
		return ""
	}
	scheme := "http"
	if s.opts.TLSCertFile != "" {
		scheme = "https"
	}
	return scheme + "://" + addr.String()
}

// Shutdown stops accepting connections and waits, until ctx ends, for
// in-flight requests to finish; then it closes what is left.
func (s *Server) Shutdown(ctx context.Context) error {
	s.closing.Store(true)
	if s.srv == nil {
		s.mu.Lock()
		defer s.mu.Unlock()
		if s.ln != nil { // bound by Listen but never served
			err := s.ln.Close()
			s.ln = nil
			return err
		}
		return nil
	}
	s.shutOnce.Do(func() {
		err := s.srv.Shutdown(ctx)
		if err != nil {
			_ = s.srv.Close()
		}
		if serr := <-s.serveErr; serr != nil && err == nil {
			err = serr
		}
		s.shutErr = err
	})
	return s.shutErr
}

// statusWriter records the status and whether anything was written.
type statusWriter struct {
	http.ResponseWriter
	status  int
	written bool
}

func (w *statusWriter) WriteHeader(code int) {
	if !w.written {
		w.status, w.written = code, true
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if !w.written {
		w.status, w.written = http.StatusOK, true
	}
	return w.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController reach Flush and deadlines.
func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// Flush forwards to the underlying writer (streaming responses).
func (w *statusWriter) Flush() {
	if !w.written {
		w.status, w.written = http.StatusOK, true
	}
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// wrap puts the middleware around one route: span, metrics, panic recovery,
// body limit, deadline, auth, error writing, logging.
func (s *Server) wrap(pattern string, role Role, rt route, h HandlerFunc) http.Handler {
	timeout := s.opts.RequestTimeout
	if rt.timeout != 0 {
		timeout = rt.timeout
	}
	method, path, _ := strings.Cut(pattern, " ")
	params := routeParams(path)
	routeAttrs := []attribute.KeyValue{
		attribute.String("http.request.method", method),
		attribute.String("http.route", path),
	}
	// Attribute sets built once per route, not per request.
	routeSet := metric.WithAttributeSet(attribute.NewSet(routeAttrs...))
	okSet := metric.WithAttributeSet(attribute.NewSet(append(slices.Clone(routeAttrs), attribute.Int("http.response.status_code", http.StatusOK))...))
	tracer := s.tracer
	if rt.untraced {
		tracer = tracenoop.NewTracerProvider().Tracer("")
	}
	return http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		start := time.Now()
		ctx := s.prop.Extract(r.Context(), propagation.HeaderCarrier(r.Header))
		ctx, span := tracer.Start(ctx, pattern, trace.WithSpanKind(trace.SpanKindServer),
			trace.WithAttributes(routeAttrs...))
		defer span.End()
		s.inflight.Add(ctx, 1, routeSet)
		defer s.inflight.Add(ctx, -1, routeSet)

		w := &statusWriter{ResponseWriter: rw}
		var principal Principal
		defer func() {
			if v := recover(); v != nil {
				if v == http.ErrAbortHandler {
					panic(v)
				}
				err := fmt.Errorf("panic: %v", v)
				s.log.Error("api handler panicked", "route", pattern, "panic", fmt.Sprint(v), "stack", string(debug.Stack()))
				span.RecordError(err)
				span.SetStatus(codes.Error, "panic")
				if !w.written {
					WriteError(w, Internal(err))
				}
			}
			status := w.status
			if !w.written {
				status = http.StatusOK
			}
			span.SetAttributes(attribute.Int("http.response.status_code", status))
			durSet := okSet
			if status != http.StatusOK {
				durSet = metric.WithAttributes(append(slices.Clone(routeAttrs), attribute.Int("http.response.status_code", status))...)
			}
			s.duration.Record(ctx, time.Since(start).Seconds(), durSet)
			lvl := slog.LevelDebug
			if status >= 500 && !(role == RolePublic && status == http.StatusServiceUnavailable) {
				lvl = slog.LevelWarn // a public probe's 503 (not ready yet) is expected: debug
			}
			if !s.log.Enabled(ctx, lvl) {
				return // build no log arguments for a disabled level
			}
			args := []any{"method", r.Method, "path", r.URL.Path, "route", path,
				"status", status, "duration", time.Since(start), "principal", principal.Name}
			if sc := span.SpanContext(); sc.IsValid() {
				args = append(args, "trace_id", sc.TraceID().String())
			}
			s.log.Log(ctx, lvl, "api request", args...)
		}()

		p, aerr := s.auth.authorize(r, role)
		if aerr != nil {
			span.SetStatus(codes.Error, aerr.Code)
			WriteError(w, aerr)
			return
		}
		principal = p
		ctx = context.WithValue(ctx, principalKey{}, p)
		if timeout > 0 {
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeout(ctx, timeout)
			defer cancel()
		}
		if perr := invalidParam(r, params); perr != nil {
			WriteError(w, perr)
			return
		}
		if r.Body != nil {
			r.Body = http.MaxBytesReader(w, r.Body, s.opts.MaxBodyBytes)
		}
		if err := h(w, r.WithContext(ctx)); err != nil {
			ae := s.toAPIError(err)
			switch {
			case role == RolePublic && ae.Code == CodeUnavailable:
				// /readyz answering 503 while hostd starts or stops is the
				// probe working, not an error.
				s.log.Debug("api probe: not ready", "route", pattern, "err", err)
			case ae.Status >= 500:
				span.RecordError(err)
				span.SetStatus(codes.Error, ae.Code)
				s.log.Error("api request failed", "route", pattern, "code", ae.Code, "err", err)
			}
			if w.written {
				s.log.Warn("api handler returned an error after writing a response", "route", pattern, "err", err)
				return
			}
			WriteError(w, ae)
		}
	})
}

package api

import (
	"net/http"
	"runtime"
	"strconv"

	"github.com/hostd-dev/hostd/docs"
	"github.com/hostd-dev/hostd/wire"
)

// registerBuiltins adds the routes every hostd has.
func (s *Server) registerBuiltins() {
	s.Handle("GET /healthz", RolePublic, func(w http.ResponseWriter, r *http.Request) error {
		return WriteJSON(w, http.StatusOK, wire.Status{Status: "ok"})
	}, WithoutTrace())
	s.Handle("GET /readyz", RolePublic, func(w http.ResponseWriter, r *http.Request) error {
		if s.closing.Load() {
			return Unavailable("shutting down")
		}
		if s.opts.Ready != nil {
			if waiting := s.opts.Ready(); len(waiting) > 0 {
				return Unavailable("not ready: waiting for %d component(s)", len(waiting)).With("waiting", waiting)
			}
		}
		return WriteJSON(w, http.StatusOK, wire.Status{Status: "ready"})
	}, WithoutTrace())
	if s.opts.Metrics != nil {
		s.Handle("GET /metrics", RoleRead, func(w http.ResponseWriter, r *http.Request) error {
			s.opts.Metrics.ServeHTTP(w, r)
			return nil
		}, WithoutTrace())
	}
	v := s.opts.Version
	if v.GoVersion == "" {
		v.GoVersion = runtime.Version()
	}
	if v.Version == "" {
		v.Version = "dev"
	}
	s.Handle("GET /v1/version", RoleRead, func(w http.ResponseWriter, r *http.Request) error {
		return WriteJSON(w, http.StatusOK, v)
	})
	// The API reference (docs/openapi.json, embedded). Role read, not
	// public: with tokens on, routes are not listed to strangers.
	s.Handle("GET /v1/openapi.json", RoleRead, func(w http.ResponseWriter, r *http.Request) error {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Content-Length", strconv.Itoa(len(docs.OpenAPI)))
		_, err := w.Write(docs.OpenAPI)
		return err
	})
}

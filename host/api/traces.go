package api

import (
	"errors"
	"net/http"
	"net/url"
	"strconv"

	"github.com/hostd-dev/hostd/host/tracestore"
	"github.com/hostd-dev/hostd/wire"
)

// TraceService answers the trace routes. It gets the request so that a
// cluster replica can pass the caller's token and trace context on to the
// other replicas.
type TraceService interface {
	// ListTraces returns a page of traces, newest first.
	ListTraces(r *http.Request, q tracestore.Query) (*wire.TracePage, error)
	// GetTrace returns the spans of a trace id or of a broadcast's
	// traces; tracestore.ErrNotFound (404) when there are none.
	GetTrace(r *http.Request, id string) (*wire.Trace, error)
}

// RegisterTraces adds the trace routes (role read):
//
//	GET /v1/traces        traces, newest first; ?limit=&page_token=&broadcast=&root=&errors=
//	GET /v1/traces/{id}   one trace (trace id) or a broadcast's traces (broadcast id), as OTLP-JSON
//
// They are served without a span of their own (WithoutTrace): a console
// polling the list would otherwise fill the span files, and the list's
// first page, with its own reads.
func RegisterTraces(s *Server, svc TraceService) {
	s.Handle("GET /v1/traces", RoleRead, func(w http.ResponseWriter, r *http.Request) error {
		q, err := TraceQueryParams(r)
		if err != nil {
			return err
		}
		page, err := svc.ListTraces(r, q)
		if err != nil {
			return err
		}
		if page.Items == nil {
			page.Items = []wire.TraceSummary{}
		}
		return WriteJSON(w, http.StatusOK, page)
	}, WithoutTrace())
	s.Handle("GET /v1/traces/{id}", RoleRead, func(w http.ResponseWriter, r *http.Request) error {
		id := r.PathValue("id")
		if id == "" || len(id) > 256 {
			return InvalidField("id", "id must be a trace id (32 hex digits) or a broadcast id")
		}
		t, err := svc.GetTrace(r, id)
		if err != nil {
			return err
		}
		return WriteJSON(w, http.StatusOK, t)
	}, WithoutTrace())
	s.MapErrors(traceError)
}

func traceError(err error) *Error {
	if errors.Is(err, tracestore.ErrNotFound) {
		return NotFound("%s", err.Error()).Wrap(err)
	}
	return nil
}

// TraceQueryParams reads the query of GET /v1/traces.
func TraceQueryParams(r *http.Request) (tracestore.Query, error) {
	page, err := PageParams(r)
	if err != nil {
		return tracestore.Query{}, err
	}
	q := tracestore.Query{Limit: page.Limit}
	if q.After, err = tracestore.ParseCursor(page.Token); err != nil {
		return q, InvalidField("page_token", "page_token is not a token returned by this API")
	}
	v := r.URL.Query()
	q.Broadcast, q.Root = v.Get("broadcast"), v.Get("root")
	if s := v.Get("errors"); s != "" {
		if q.Errors, err = strconv.ParseBool(s); err != nil {
			return q, InvalidField("errors", "errors must be true or false, got %q", s)
		}
	}
	return q, nil
}

// TraceQueryValues is the query string of q (for a replica asking the
// others).
func TraceQueryValues(q tracestore.Query) url.Values {
	v := url.Values{}
	v.Set("limit", strconv.Itoa(q.Limit))
	if q.After != nil {
		v.Set("page_token", q.After.Token())
	}
	if q.Broadcast != "" {
		v.Set("broadcast", q.Broadcast)
	}
	if q.Root != "" {
		v.Set("root", q.Root)
	}
	if q.Errors {
		v.Set("errors", "true")
	}
	return v
}

// LocalTraces serves the trace routes from one data directory's span
// files (the file exporter's <data dir>/traces).
type LocalTraces struct {
	cache *tracestore.Cache
}

// NewLocalTraces serves the span files under dataDir.
func NewLocalTraces(dataDir string) *LocalTraces {
	return &LocalTraces{cache: tracestore.NewCache(tracestore.DataDirTraces(dataDir))}
}

// ListTraces implements TraceService.
func (l *LocalTraces) ListTraces(_ *http.Request, q tracestore.Query) (*wire.TracePage, error) {
	st, err := l.cache.Load()
	if err != nil {
		return nil, err
	}
	items, next := st.Page(q)
	return &wire.TracePage{Items: items, NextPageToken: next}, nil
}

// GetTrace implements TraceService.
func (l *LocalTraces) GetTrace(_ *http.Request, id string) (*wire.Trace, error) {
	st, err := l.cache.Load()
	if err != nil {
		return nil, err
	}
	t, err := st.Answer(id)
	if err != nil {
		return nil, err
	}
	return &t, nil
}

package apispec

import (
	"bytes"
	"errors"
	"io"
	"net/http"
)

// Reporter receives drift; *testing.T is one.
type Reporter interface {
	Errorf(format string, args ...any)
}

// maxKeep bounds the bytes of a body kept for checking (bigger ones are
// passed on but not checked).
const maxKeep = 16 << 20

// Handler wraps h so that every exchange it serves is checked with Check
// after h answered; drift is reported to rep (a test fails, naming the
// request and what differs). With strict false, requests for routes the
// spec does not have (a test's own routes) are not checked.
func (s *Spec) Handler(rep Reporter, strict bool, h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var reqBody []byte
		if r.Body != nil && r.Body != http.NoBody {
			b, err := io.ReadAll(io.LimitReader(r.Body, maxKeep))
			reqBody = b
			rest := r.Body
			r.Body = struct {
				io.Reader
				io.Closer
			}{io.MultiReader(bytes.NewReader(b), errReader{err}, rest), rest}
		}
		probe := r.Clone(r.Context()) // before h can change it
		rec := &recorder{ResponseWriter: w}
		h.ServeHTTP(rec, r)
		if rec.status == 0 {
			rec.status = http.StatusOK
		}
		x := &Exchange{Request: probe, RequestBody: reqBody, Status: rec.status, Header: w.Header().Clone(),
			ResponseBody: rec.body.Bytes(), Truncated: rec.truncated}
		err := s.Check(x)
		if err == nil || (!strict && errors.Is(err, ErrUnknownRoute)) {
			return
		}
		defer func() { _ = recover() }() // a report after the test ended
		rep.Errorf("API answer drifts from docs/openapi.json: %v\nrequest body: %.300s\nresponse body: %.600s", err, reqBody, x.ResponseBody)
	})
}

// errReader returns err once the kept bytes are read (nil: EOF, go on to
// the rest of the body).
type errReader struct{ err error }

func (e errReader) Read([]byte) (int, error) {
	if e.err != nil {
		return 0, e.err
	}
	return 0, io.EOF
}

// recorder passes the answer on and keeps a copy of it.
type recorder struct {
	http.ResponseWriter
	status    int
	body      bytes.Buffer
	truncated bool
}

func (r *recorder) WriteHeader(code int) {
	if r.status == 0 {
		r.status = code
	}
	r.ResponseWriter.WriteHeader(code)
}

func (r *recorder) Write(b []byte) (int, error) {
	if r.status == 0 {
		r.status = http.StatusOK
	}
	if r.body.Len()+len(b) <= maxKeep {
		r.body.Write(b)
	} else {
		r.truncated = true
	}
	return r.ResponseWriter.Write(b)
}

// Flush forwards to the underlying writer (streams, long polls).
func (r *recorder) Flush() {
	if f, ok := r.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// Unwrap lets http.ResponseController reach the underlying writer.
func (r *recorder) Unwrap() http.ResponseWriter { return r.ResponseWriter }

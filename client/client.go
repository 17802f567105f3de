package client

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/hostd-dev/hostd/wire"
)

// Client calls one hostd. It is safe for concurrent use.
type Client struct {
	base     *url.URL
	token    string
	http     *http.Client
	header   http.Header
	attempts int  // tries of a retryable call (WithRetries)
	autoKey  bool // add an idempotency key to submits and acquires
}

// Option configures a Client.
type Option func(*Client)

// WithToken sends "Authorization: Bearer <token>" on every request.
func WithToken(token string) Option { return func(c *Client) { c.token = token } }

// WithHTTPClient replaces the default http.Client (e.g. for custom TLS).
func WithHTTPClient(hc *http.Client) Option { return func(c *Client) { c.http = hc } }

// WithHeader adds a header to every request (e.g. traceparent).
func WithHeader(key, value string) Option {
	return func(c *Client) { c.header.Add(key, value) }
}

// WithRetries sets how many times a call that is safe to repeat is tried
// (default 5; 1 = never retry). Safe calls are reads and writes carrying an
// idempotency key (SubmitBroadcast and AcquireLock get one by default, see
// WithoutAutoIdempotencyKey). They are retried when the daemon answers
// 503 unavailable (starting, shutting down, a cluster electing a leader)
// or cannot be reached, after the answer's Retry-After (at most 2 s), until
// the context ends.
func WithRetries(attempts int) Option {
	return func(c *Client) { c.attempts = max(1, attempts) }
}

// WithoutAutoIdempotencyKey stops SubmitBroadcast and AcquireLock from
// adding a random idempotency key to requests without one. Without a key
// such a call is never retried: a lost answer could hide a done write.
func WithoutAutoIdempotencyKey() Option { return func(c *Client) { c.autoKey = false } }

// NewIdempotencyKey returns a random key ("auto-" and 32 hex digits), the
// one the client adds per call by default.
func NewIdempotencyKey() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return "auto-" + hex.EncodeToString(b[:])
}

// New returns a client for the hostd at addr: a URL ("http://host:port",
// "https://...") or a bare "host:port" (http).
func New(addr string, opts ...Option) (*Client, error) {
	if addr == "" {
		return nil, errors.New("client: empty address")
	}
	if !strings.Contains(addr, "://") {
		addr = "http://" + addr
	}
	u, err := url.Parse(addr)
	if err != nil {
		return nil, fmt.Errorf("client: address %q: %w", addr, err)
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("client: address %q: want http://host:port or https://host:port", addr)
	}
	u.Path = strings.TrimSuffix(u.Path, "/")
	c := &Client{base: u, http: &http.Client{Transport: defaultTransport}, header: http.Header{}, attempts: 5, autoKey: true}
	for _, o := range opts {
		o(c)
	}
	return c, nil
}

// defaultTransport is shared by the Clients without WithHTTPClient. It is
// http.DefaultTransport with a keep-alive pool sized for concurrent use:
// the default keeps only 2 idle connections per host, so more than 2
// goroutines sharing a Client would open (and TIME_WAIT) a new TCP
// connection for most requests.
var defaultTransport = func() *http.Transport {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.MaxIdleConns = 256
	t.MaxIdleConnsPerHost = 128
	return t
}()

// Addr is the base URL.
func (c *Client) Addr() string { return c.base.String() }

// Error is an error answered by the API.
type Error struct {
	// Status is the HTTP status.
	Status int
	// Code is the API's stable error code (e.g. "not_found").
	Code string
	// Message is human-readable.
	Message string
	// Details holds structured context (field names, limits, ...).
	Details map[string]any

	retryAfter int // seconds, from the Retry-After header
}

func (e *Error) Error() string {
	return fmt.Sprintf("%s (%d %s): %s", e.Code, e.Status, http.StatusText(e.Status), e.Message)
}

// HasCode reports whether err is an *Error with the given code.
func HasCode(err error, code string) bool {
	var e *Error
	return errors.As(err, &e) && e.Code == code
}

// IsNotFound reports an API not_found error.
func IsNotFound(err error) bool { return HasCode(err, "not_found") }

// IsConflict reports an API conflict error.
func IsConflict(err error) bool { return HasCode(err, "conflict") }

// Do sends in (JSON-encoded unless nil) to method path (which may carry a
// query) and decodes the JSON response into out (unless nil). A non-2xx
// answer is returned as *Error.
// GET requests are retried as WithRetries says; other methods are sent
// once (use DoIdempotent for a write that carries an idempotency key).
func (c *Client) Do(ctx context.Context, method, path string, in, out any) error {
	return c.do(ctx, method, path, in, out, method == http.MethodGet)
}

// DoIdempotent is Do for a write that is safe to repeat (it carries an
// idempotency key): it is retried like a read.
func (c *Client) DoIdempotent(ctx context.Context, method, path string, in, out any) error {
	return c.do(ctx, method, path, in, out, true)
}

func (c *Client) do(ctx context.Context, method, path string, in, out any, safe bool) error {
	var raw []byte
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return fmt.Errorf("client: encode request: %w", err)
		}
		raw = b
	}
	var resp *http.Response
	for attempt := 1; ; attempt++ {
		var body io.Reader
		if raw != nil {
			body = bytes.NewReader(raw)
		}
		var err error
		resp, err = c.Raw(ctx, method, path, body, "application/json")
		if err == nil {
			break
		}
		wait, again := retryAfter(err)
		if !safe || !again || attempt >= c.attempts || ctx.Err() != nil {
			return err
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return err
		case <-t.C:
		}
	}
	defer resp.Body.Close()
	if out == nil {
		_, _ = io.Copy(io.Discard, resp.Body)
		return nil
	}
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		return fmt.Errorf("client: decode %s %s response: %w", method, path, err)
	}
	return nil
}

// Raw sends a request and returns the response for the caller to read and
// close (streams such as backups). A non-2xx answer is returned as *Error
// (the body already consumed).
func (c *Client) Raw(ctx context.Context, method, path string, body io.Reader, contentType string) (*http.Response, error) {
	u := *c.base
	rel, err := url.Parse(path)
	if err != nil {
		return nil, fmt.Errorf("client: path %q: %w", path, err)
	}
	u.Path = c.base.Path + rel.Path
	if rel.RawPath != "" { // keep escapes such as %2F inside a path segment
		u.RawPath = c.base.EscapedPath() + rel.EscapedPath()
	}
	u.RawQuery = rel.RawQuery
	req, err := http.NewRequestWithContext(ctx, method, u.String(), body)
	if err != nil {
		return nil, fmt.Errorf("client: %w", err)
	}
	for k, vs := range c.header {
		req.Header[k] = vs
	}
	if body != nil && contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	req.Header.Set("Accept", "application/json")
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, fmt.Errorf("client: %s %s: %w", method, u.Redacted(), err)
	}
	if resp.StatusCode/100 != 2 {
		defer resp.Body.Close()
		return nil, decodeError(resp)
	}
	return resp, nil
}

// retryAfter says whether err is worth another try of a safe call, and
// after how long: 503 unavailable (after its Retry-After, at most 2 s) or
// no answer at all (the daemon restarting; 250 ms).
func retryAfter(err error) (time.Duration, bool) {
	var ae *Error
	if errors.As(err, &ae) {
		if ae.Status != http.StatusServiceUnavailable {
			return 0, false
		}
		d := time.Duration(ae.retryAfter) * time.Second
		if d <= 0 {
			d = 250 * time.Millisecond
		}
		return min(d, 2*time.Second), true
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return 0, false
	}
	var ue *url.Error
	return 250 * time.Millisecond, errors.As(err, &ue)
}

func decodeError(resp *http.Response) error {
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	var env wire.ErrorResponse
	if json.Unmarshal(b, &env) == nil && env.Error != nil && env.Error.Code != "" {
		ra, _ := strconv.Atoi(resp.Header.Get("Retry-After"))
		return &Error{Status: resp.StatusCode, Code: env.Error.Code, Message: env.Error.Message, Details: env.Error.Details, retryAfter: ra}
	}
	msg := strings.TrimSpace(string(b))
	if len(msg) > 200 {
		msg = msg[:200] + "…"
	}
	if msg == "" {
		msg = http.StatusText(resp.StatusCode)
	}
	return &Error{Status: resp.StatusCode, Code: "http_" + fmt.Sprint(resp.StatusCode), Message: msg}
}

// Version is GET /v1/version.
type Version = wire.Version

// Version returns the daemon's version.
func (c *Client) Version(ctx context.Context) (*Version, error) {
	var v Version
	if err := c.Do(ctx, http.MethodGet, "/v1/version", nil, &v); err != nil {
		return nil, err
	}
	return &v, nil
}

// Health calls GET /healthz; nil means the daemon is alive.
func (c *Client) Health(ctx context.Context) error {
	return c.Do(ctx, http.MethodGet, "/healthz", nil, nil)
}

// Ready calls GET /readyz; nil means ready, else an *Error whose Details
// name what is still pending.
func (c *Client) Ready(ctx context.Context) error {
	return c.Do(ctx, http.MethodGet, "/readyz", nil, nil)
}

// WaitReady polls /readyz until ready or ctx ends.
func (c *Client) WaitReady(ctx context.Context, every time.Duration) error {
	for {
		err := c.Ready(ctx)
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("client: not ready: %w (last: %v)", ctx.Err(), err)
		case <-time.After(every):
		}
	}
}

// Page is the pagination of a list call.
type Page struct {
	Limit int    // 0 = server default (100)
	Token string // from the previous response's NextPageToken
}

// Query appends limit and page_token to path.
func (p Page) Query(path string) string {
	q := url.Values{}
	if p.Limit > 0 {
		q.Set("limit", fmt.Sprint(p.Limit))
	}
	if p.Token != "" {
		q.Set("page_token", p.Token)
	}
	if len(q) == 0 {
		return path
	}
	sep := "?"
	if strings.Contains(path, "?") {
		sep = "&"
	}
	return path + sep + q.Encode()
}

// List is one page of a list response.
type List[T any] = wire.List[T]

// OpenAPI returns the daemon's API reference, the OpenAPI 3.1 document it
// was built with (GET /v1/openapi.json, role read).
func (c *Client) OpenAPI(ctx context.Context) ([]byte, error) {
	resp, err := c.Raw(ctx, http.MethodGet, "/v1/openapi.json", nil, "")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("client: read /v1/openapi.json: %w", err)
	}
	return b, nil
}

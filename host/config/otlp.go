package config

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"strings"
)

// OTLPTracesPath is the OTLP/HTTP path for spans, used when an endpoint
// URL has no path.
const OTLPTracesPath = "/v1/traces"

// OTLPEndpoint is a parsed OTLP collector endpoint: the one parser behind
// telemetry.traces.endpoint (both OTLP exporters) and `hostd trace push
// --endpoint`, so that every place accepts the same spellings.
type OTLPEndpoint struct {
	// Scheme is "http" or "https" for a URL, "" for host:port.
	Scheme string
	// HostPort is the collector's host:port (for a URL without a port,
	// the host alone: the scheme's port applies).
	HostPort string
	// Path is the OTLP/HTTP path: the URL's path, or OTLPTracesPath when
	// the URL has none (or "/") or the endpoint is host:port.
	Path string
	// HasPath reports whether the URL named a path of its own.
	HasPath bool
}

// ErrOTLPEndpoint is returned (wrapped) by ParseOTLPEndpoint.
var ErrOTLPEndpoint = errors.New("config: bad OTLP endpoint")

// ParseOTLPEndpoint accepts a URL ("http://collector:4318",
// "https://collector/otlp/v1/traces") or host:port ("collector:4317").
// A URL's scheme says whether TLS is used; for host:port the insecure
// option does.
func ParseOTLPEndpoint(s string) (OTLPEndpoint, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return OTLPEndpoint{}, fmt.Errorf("%w: empty", ErrOTLPEndpoint)
	}
	if !strings.Contains(s, "://") {
		host, port, err := net.SplitHostPort(s)
		if err != nil || host == "" || port == "" || strings.ContainsAny(s, "/?#") {
			return OTLPEndpoint{}, fmt.Errorf("%w %q: want host:port (collector:4317) or a URL (http://collector:4318)", ErrOTLPEndpoint, s)
		}
		return OTLPEndpoint{HostPort: s, Path: OTLPTracesPath}, nil
	}
	u, err := url.Parse(s)
	if err != nil {
		return OTLPEndpoint{}, fmt.Errorf("%w %q: %v", ErrOTLPEndpoint, s, err)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return OTLPEndpoint{}, fmt.Errorf("%w %q: the URL scheme must be http or https", ErrOTLPEndpoint, s)
	}
	if u.Host == "" || u.Hostname() == "" {
		return OTLPEndpoint{}, fmt.Errorf("%w %q: the URL has no host", ErrOTLPEndpoint, s)
	}
	if u.RawQuery != "" || u.Fragment != "" || u.User != nil {
		return OTLPEndpoint{}, fmt.Errorf("%w %q: a query, fragment or user in the URL is not supported (headers go in telemetry.traces.headers)", ErrOTLPEndpoint, s)
	}
	e := OTLPEndpoint{Scheme: u.Scheme, HostPort: u.Host, Path: OTLPTracesPath}
	if u.Path != "" && u.Path != "/" {
		e.Path, e.HasPath = u.Path, true
	}
	return e, nil
}

// URL is the OTLP/HTTP URL of e; insecure picks http for a host:port
// endpoint.
func (e OTLPEndpoint) URL(insecure bool) string {
	scheme := e.Scheme
	if scheme == "" {
		scheme = "https"
		if insecure {
			scheme = "http"
		}
	}
	return (&url.URL{Scheme: scheme, Host: e.HostPort, Path: e.Path}).String()
}

// Insecure reports whether the exporter talks plain text: an http:// URL,
// or host:port with the insecure option.
func (e OTLPEndpoint) Insecure(insecure bool) bool {
	if e.Scheme != "" {
		return e.Scheme == "http"
	}
	return insecure
}

// validateOTLPEndpoint reports a telemetry.traces.endpoint the chosen
// OTLP exporter cannot use.
func (t *Traces) validateOTLPEndpoint(p *problems) {
	if t.Endpoint == "" || (t.Exporter != "otlp-http" && t.Exporter != "otlp-grpc") {
		return
	}
	e, err := ParseOTLPEndpoint(t.Endpoint)
	if err != nil {
		p.addOnce("telemetry.traces.endpoint", "%v", err)
		return
	}
	if t.Exporter == "otlp-grpc" && e.HasPath {
		p.addOnce("telemetry.traces.endpoint", "otlp-grpc takes host:port or a URL without a path, got %q", t.Endpoint)
	}
	if e.Scheme == "https" && t.Insecure {
		p.addOnce("telemetry.traces.insecure", "contradicts the https:// endpoint %q (use http:// for plain text)", t.Endpoint)
	}
}

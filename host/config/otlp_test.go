package config

import (
	"errors"
	"strings"
	"testing"
)

func TestParseOTLPEndpoint(t *testing.T) {
	cases := []struct {
		in                 string
		scheme, host, path string
		url                string // URL(insecure=false)
		bad                bool
	}{
		{in: "http://collector:4318", scheme: "http", host: "collector:4318", path: "/v1/traces", url: "http://collector:4318/v1/traces"},
		{in: "http://collector:4318/", scheme: "http", host: "collector:4318", path: "/v1/traces", url: "http://collector:4318/v1/traces"},
		{in: "https://tempo.example/otlp/v1/traces", scheme: "https", host: "tempo.example", path: "/otlp/v1/traces", url: "https://tempo.example/otlp/v1/traces"},
		{in: " collector:4317 ", host: "collector:4317", path: "/v1/traces", url: "https://collector:4317/v1/traces"},
		{in: "[::1]:4317", host: "[::1]:4317", path: "/v1/traces", url: "https://[::1]:4317/v1/traces"},
		{in: "", bad: true},
		{in: "collector", bad: true},
		{in: "collector:4318/v1/traces", bad: true},
		{in: "ftp://collector:21", bad: true},
		{in: "http://", bad: true},
		{in: "http://collector:4318?x=1", bad: true},
		{in: "http://user:pw@collector:4318", bad: true},
	}
	for _, c := range cases {
		e, err := ParseOTLPEndpoint(c.in)
		if c.bad {
			if !errors.Is(err, ErrOTLPEndpoint) {
				t.Errorf("%q: got %+v, %v; want ErrOTLPEndpoint", c.in, e, err)
			}
			continue
		}
		if err != nil || e.Scheme != c.scheme || e.HostPort != c.host || e.Path != c.path || e.URL(false) != c.url {
			t.Errorf("%q: got %+v url %s, %v", c.in, e, e.URL(false), err)
		}
	}
	if e, _ := ParseOTLPEndpoint("collector:4318"); e.URL(true) != "http://collector:4318/v1/traces" || !e.Insecure(true) || e.Insecure(false) {
		t.Errorf("host:port insecure: %+v", e)
	}
	if e, _ := ParseOTLPEndpoint("http://collector:4318"); !e.Insecure(false) {
		t.Error("an http:// URL is plain text")
	}
}

// check-config refuses an endpoint the exporter could not use, instead of
// accepting it and exporting nothing.
func TestValidateOTLPEndpoint(t *testing.T) {
	cases := []struct {
		exporter, endpoint string
		insecure           bool
		problem            string // "" = valid
	}{
		{"otlp-http", "http://collector:4318", false, ""},
		{"otlp-http", "collector:4318", true, ""},
		{"otlp-grpc", "http://collector:4317", false, ""},
		{"otlp-grpc", "collector:4317", false, ""},
		{"otlp-http", "collector", false, "telemetry.traces.endpoint"},
		{"otlp-grpc", "http://collector:4317/v1/traces", false, "telemetry.traces.endpoint"},
		{"otlp-http", "https://collector:4318", true, "telemetry.traces.insecure"},
		{"file", "not an endpoint", false, ""},
	}
	for _, c := range cases {
		cfg := Default()
		cfg.Telemetry.Traces.Exporter, cfg.Telemetry.Traces.Endpoint, cfg.Telemetry.Traces.Insecure = c.exporter, c.endpoint, c.insecure
		err := cfg.Validate()
		if c.problem == "" && err != nil || c.problem != "" && (err == nil || !strings.Contains(err.Error(), c.problem)) {
			t.Errorf("%s %q insecure=%v: %v (want problem %q)", c.exporter, c.endpoint, c.insecure, err, c.problem)
		}
	}
}

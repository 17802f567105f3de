package config

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func writeFile(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "hostd.yaml")
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func problemsOf(t *testing.T, err error) []Problem {
	t.Helper()
	var ve *ValidationError
	if !errors.As(err, &ve) {
		t.Fatalf("want *ValidationError, got %T: %v", err, err)
	}
	return ve.Problems
}

func keysOf(ps []Problem) []string {
	var out []string
	for _, p := range ps {
		out = append(out, p.Key)
	}
	return out
}

func TestLoadDefaults(t *testing.T) {
	cfg, err := Load(Source{Env: []string{}})
	if err != nil {
		t.Fatal(err)
	}
	want := Default()
	if diff := cmp.Diff(&want, cfg); diff != "" {
		t.Fatalf("Load() without sources differs from Default() (-want +got):\n%s", diff)
	}
	// The overview.md defaults table.
	if cfg.API.Listen != "127.0.0.1:7070" || cfg.Data.Dir != "./hostd-data" ||
		cfg.API.RequestTimeout != 30*time.Second || cfg.API.MaxBodyBytes != 4<<20 ||
		cfg.Locks.DefaultTTL != 30*time.Second || cfg.Locks.MaxTTL != 10*time.Minute ||
		cfg.Plugins.CallTimeout != 5*time.Second || cfg.Plugins.MemoryLimit != 64<<20 ||
		cfg.Broadcast.Tombstones.MaxLifetime != 24*time.Hour || cfg.Broadcast.Tombstones.MaxCount != 8192 ||
		cfg.Broadcast.Tombstones.CheckInterval != 5*time.Minute || cfg.Broadcast.MaxAttempts != 0 ||
		!cfg.Data.SyncWrites || cfg.Telemetry.Traces.Sampler != "always_on" {
		t.Fatalf("defaults do not match docs: %+v", cfg)
	}
}

func TestPrecedenceFileEnvFlags(t *testing.T) {
	f := writeFile(t, `
api:
  listen: 127.0.0.1:1111
  request_timeout: 5s
  max_body_bytes: 1MiB
data:
  dir: /from/file
  sync_writes: false
log:
  level: debug
telemetry:
  traces:
    headers:
      x-api-key: secret
`)
	env := []string{
		"HOSTD_API__LISTEN=127.0.0.1:2222",
		"HOSTD_DATA__DIR=/from/env",
		"HOSTD_LOG__FORMAT=json",
		"HOSTD_TELEMETRY__TRACES__SAMPLER_RATIO=0.25",
		"HOSTD_ADDR=http://elsewhere:1", // CLI variable: not a config key
		"HOSTD_TOKEN=whatever",
		"OTHER=1",
	}
	cfg, err := Load(Source{File: f, Env: env, Flags: map[string]any{"data.dir": "/from/flag"}})
	if err != nil {
		t.Fatal(err)
	}
	checks := []struct {
		name      string
		got, want any
	}{
		{"file only", cfg.API.RequestTimeout, 5 * time.Second},
		{"file size unit", cfg.API.MaxBodyBytes, ByteSize(1 << 20)},
		{"file bool", cfg.Data.SyncWrites, false},
		{"file level", cfg.Log.Level, "debug"},
		{"env beats file", cfg.API.Listen, "127.0.0.1:2222"},
		{"env only", cfg.Log.Format, "json"},
		{"env float, single underscore kept", cfg.Telemetry.Traces.SamplerRatio, 0.25},
		{"flag beats env", cfg.Data.Dir, "/from/flag"},
		{"map from file", cfg.Telemetry.Traces.Headers["x-api-key"], "secret"},
		{"default kept", cfg.Locks.MaxTTL, 10 * time.Minute},
	}
	for _, c := range checks {
		if !cmp.Equal(c.got, c.want) {
			t.Errorf("%s: got %v, want %v", c.name, c.got, c.want)
		}
	}
}

func TestThreeMistakesAllReported(t *testing.T) {
	f := writeFile(t, `
api:
  listen: 0.0.0.0:7070
  request_timeout: soon
locks:
  default_ttl: 1h
log:
  levl: debug
`)
	_, err := Load(Source{File: f, Env: []string{}})
	got := keysOf(problemsOf(t, err))
	want := []string{"api.listen", "api.request_timeout", "locks.default_ttl", "log.levl"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("problem keys (-want +got):\n%s\nerror:\n%v", diff, err)
	}
	msg := err.Error()
	for _, s := range []string{"not a loopback address", `did you mean "log.level"`, "must not exceed locks.max_ttl", "4 problems"} {
		if !strings.Contains(msg, s) {
			t.Errorf("error does not say %q:\n%s", s, msg)
		}
	}
}

func TestUnknownKeys(t *testing.T) {
	cases := []struct {
		name string
		yaml string
		env  []string
		want []string
		says string
	}{
		{"top-level", "apix:\n  listen: x\n", nil, []string{"apix"}, `did you mean "api"`},
		{"nested", "data:\n  dirr: /x\n", nil, []string{"data.dirr"}, `did you mean "data.dir"`},
		{"in list element", "api:\n  listen: 0.0.0.0:1\n  tokens:\n    - name: a\n      token: 0123456789abcdefX\n      role: read\n      rolee: x\n",
			nil, []string{"api.tokens[0].rolee"}, "unknown key"},
		{"env", "", []string{"HOSTD_API__LISTN=1.2.3.4:5"}, []string{"api.listn"}, "HOSTD_API__LISTN"},
		{"section as scalar", "api: 5\n", nil, []string{"api"}, "must be a mapping"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			src := Source{Env: c.env}
			if src.Env == nil {
				src.Env = []string{}
			}
			if c.yaml != "" {
				src.File = writeFile(t, c.yaml)
			}
			_, err := Load(src)
			if diff := cmp.Diff(c.want, keysOf(problemsOf(t, err))); diff != "" {
				t.Fatalf("keys (-want +got):\n%s\n%v", diff, err)
			}
			if !strings.Contains(err.Error(), c.says) {
				t.Fatalf("error does not say %q: %v", c.says, err)
			}
		})
	}
}

func TestFileErrors(t *testing.T) {
	_, err := Load(Source{File: filepath.Join(t.TempDir(), "missing.yaml"), Env: []string{}})
	if ps := problemsOf(t, err); len(ps) != 1 || !strings.Contains(ps[0].Message, "cannot read") {
		t.Fatalf("missing file: %v", err)
	}
	_, err = Load(Source{File: writeFile(t, "api: [unclosed\n"), Env: []string{}})
	if ps := problemsOf(t, err); len(ps) != 1 || !strings.Contains(ps[0].Message, "cannot parse YAML") {
		t.Fatalf("bad yaml: %v", err)
	}
}

func TestTokensValidation(t *testing.T) {
	f := writeFile(t, `
api:
  listen: 0.0.0.0:7070
  tokens:
    - {name: ops, token: "0123456789abcdef0", role: admin}
    - {name: ops, token: "short", role: root}
    - {token: "0123456789abcdef0", role: read}
`)
	_, err := Load(Source{File: f, Env: []string{}})
	want := []string{"api.tokens[1].name", "api.tokens[1].role", "api.tokens[1].token", "api.tokens[2].name", "api.tokens[2].token"}
	if diff := cmp.Diff(want, keysOf(problemsOf(t, err))); diff != "" {
		t.Fatalf("(-want +got):\n%s\n%v", diff, err)
	}
	// With valid tokens a non-loopback listen is fine.
	f = writeFile(t, "api:\n  listen: 0.0.0.0:7070\n  tokens:\n    - {name: ops, token: \"0123456789abcdef0\", role: admin}\n")
	if _, err := Load(Source{File: f, Env: []string{}}); err != nil {
		t.Fatal(err)
	}
}

func TestValidateDefaultsAndExample(t *testing.T) {
	d := Default()
	if err := d.Validate(); err != nil {
		t.Fatalf("defaults invalid: %v", err)
	}
	// examples/hostd.yaml documents every option; it must load.
	ex := filepath.Join("..", "..", "examples", "hostd.yaml")
	if _, err := os.Stat(ex); err != nil {
		t.Fatalf("examples/hostd.yaml: %v", err)
	}
	if _, err := Load(Source{File: ex, Env: []string{}}); err != nil {
		t.Fatalf("examples/hostd.yaml: %v", err)
	}
}

func TestEnvNames(t *testing.T) {
	for key, name := range map[string]string{
		"api.listen":                         "HOSTD_API__LISTEN",
		"data.sync_writes":                   "HOSTD_DATA__SYNC_WRITES",
		"broadcast.tombstones.max_lifetime":  "HOSTD_BROADCAST__TOMBSTONES__MAX_LIFETIME",
		"telemetry.traces.headers.x-api-key": "HOSTD_TELEMETRY__TRACES__HEADERS__X-API-KEY",
	} {
		if got := EnvName(key); got != name {
			t.Errorf("EnvName(%q) = %q, want %q", key, got, name)
		}
		if got, ok := EnvKey(name); !ok || got != key {
			t.Errorf("EnvKey(%q) = %q, %v", name, got, ok)
		}
	}
	for _, name := range []string{"HOSTD_ADDR", "HOSTD_TOKEN", "HOSTD_FAILPOINTS_LOG", "PATH"} {
		if k, ok := EnvKey(name); ok {
			t.Errorf("EnvKey(%q) = %q, want not a config key", name, k)
		}
	}
}

func TestByteSize(t *testing.T) {
	for in, want := range map[string]ByteSize{"0": 0, "1024": 1024, "4MiB": 4 << 20, "2 GiB": 2 << 30, "10KB": 10000, "7B": 7} {
		var b ByteSize
		if err := b.UnmarshalText([]byte(in)); err != nil || b != want {
			t.Errorf("%q: got %d, %v; want %d", in, b, err, want)
		}
	}
	for _, in := range []string{"", "-1", "4XB", "MiB", "99999999999999GiB"} {
		var b ByteSize
		if err := b.UnmarshalText([]byte(in)); err == nil {
			t.Errorf("%q: accepted as %d", in, b)
		}
	}
	if s := ByteSize(4 << 20).String(); s != "4MiB" {
		t.Errorf("String = %s", s)
	}
}

func TestTokenFile(t *testing.T) {
	dir := t.TempDir()
	secret := filepath.Join(dir, "secret")
	if err := os.WriteFile(secret, []byte("  file-secret-0123456789\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	f := writeFile(t, fmt.Sprintf("api:\n  listen: 0.0.0.0:7070\n  tokens:\n    - {name: ops, token_file: %s, role: admin}\n", secret))
	cfg, err := Load(Source{File: f, Env: []string{}})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.API.Tokens[0].Token != "file-secret-0123456789" {
		t.Fatalf("token %q", cfg.API.Tokens[0].Token)
	}
	f = writeFile(t, fmt.Sprintf(`
api:
  tokens:
    - {name: a, token_file: %s, role: read}
    - {name: b, token_file: %s, token: inline-secret-0123456789, role: read}
`, filepath.Join(dir, "missing"), secret))
	_, err = Load(Source{File: f, Env: []string{}})
	want := []string{"api.tokens[0].token_file", "api.tokens[1]"}
	if diff := cmp.Diff(want, keysOf(problemsOf(t, err))); diff != "" {
		t.Fatalf("(-want +got):\n%s\n%v", diff, err)
	}
}

package config

import (
	"fmt"
	"net"
	"os"
	"strings"
	"time"
)

// API configures the HTTP API server.
type API struct {
	// Listen is the TCP address of the API. Default "127.0.0.1:7070".
	// A non-loopback address requires at least one token in Tokens.
	Listen string `koanf:"listen"`
	// TLS serves HTTPS when both files are set. Default: off.
	TLS TLS `koanf:"tls"`
	// Tokens are the bearer tokens accepted by the API, each with a role.
	// Default: none, which disables authentication (loopback only).
	Tokens []Token `koanf:"tokens"`
	// RequestTimeout bounds every request's handling. Default 30s.
	RequestTimeout time.Duration `koanf:"request_timeout"`
	// MaxBodyBytes is the largest request body accepted. Default 4MiB.
	MaxBodyBytes ByteSize `koanf:"max_body_bytes"`
	// ReadHeaderTimeout bounds reading request headers. Default 10s.
	ReadHeaderTimeout time.Duration `koanf:"read_header_timeout"`
	// IdleTimeout closes idle keep-alive connections. Default 2m.
	IdleTimeout time.Duration `koanf:"idle_timeout"`
	// ShutdownTimeout is how long a graceful shutdown waits for in-flight
	// requests before closing connections. Default 30s.
	ShutdownTimeout time.Duration `koanf:"shutdown_timeout"`
}

// TLS names a certificate and key in PEM files.
type TLS struct {
	// CertFile is the PEM certificate (chain). Default "" (no TLS).
	CertFile string `koanf:"cert_file"`
	// KeyFile is the PEM private key. Default "" (no TLS).
	KeyFile string `koanf:"key_file"`
}

// Enabled reports whether TLS is configured.
func (t TLS) Enabled() bool { return t.CertFile != "" || t.KeyFile != "" }

// Token is one bearer token.
type Token struct {
	// Name identifies the token in logs and audit records (never the
	// secret). Required.
	Name string `koanf:"name"`
	// Token is the secret sent as "Authorization: Bearer <token>".
	// At least 16 characters. Set Token or TokenFile.
	Token string `koanf:"token"`
	// TokenFile is a file holding the secret (surrounding whitespace
	// ignored), e.g. a mounted Kubernetes secret, so the secret stays out
	// of the config file. Load reads it into Token.
	TokenFile string `koanf:"token_file"`
	// Role is read, write or admin. Required.
	Role string `koanf:"role"`
	// ExpiresAt is when the token stops being accepted, RFC 3339 (e.g.
	// "2027-01-31T00:00:00Z"); requests with it then get 401
	// token_expired. hostd warns at start about tokens expiring within 7
	// days. Default "" (never expires).
	ExpiresAt string `koanf:"expires_at"`
}

// Expiry parses ExpiresAt (zero time if empty).
func (t Token) Expiry() (time.Time, error) {
	if t.ExpiresAt == "" {
		return time.Time{}, nil
	}
	return time.Parse(time.RFC3339, t.ExpiresAt)
}

// Roles are the token roles, weakest first.
var Roles = []string{"read", "write", "admin"}

// MinTokenLength is the shortest token secret accepted.
const MinTokenLength = 16

func defaultAPI() API {
	return API{
		Listen:            "127.0.0.1:7070",
		RequestTimeout:    30 * time.Second,
		MaxBodyBytes:      4 << 20,
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       2 * time.Minute,
		ShutdownTimeout:   30 * time.Second,
	}
}

// readTokenFiles fills Token from TokenFile, reporting what cannot be read.
func (a *API) readTokenFiles(p *problems) {
	for i := range a.Tokens {
		t := &a.Tokens[i]
		if t.TokenFile == "" {
			continue
		}
		key := fmt.Sprintf("api.tokens[%d]", i)
		if t.Token != "" {
			p.add(key, "set token or token_file, not both")
			p.mark(key + ".token")
			p.mark(key + ".token_file")
			continue
		}
		b, err := os.ReadFile(t.TokenFile)
		if err != nil {
			p.add(key+".token_file", "cannot read the token: %v", err)
			p.mark(key + ".token_file")
			p.mark(key + ".token")
			continue
		}
		t.Token = strings.TrimSpace(string(b))
	}
}

func (a *API) validate(p *problems) {
	if host, port, err := net.SplitHostPort(a.Listen); err != nil {
		p.addOnce("api.listen", "must be host:port (e.g. 127.0.0.1:7070), got %q: %v", a.Listen, err)
	} else if port == "" {
		p.addOnce("api.listen", "missing port in %q", a.Listen)
	} else if !IsLoopback(host) && len(a.Tokens) == 0 {
		p.addOnce("api.listen", "%q is not a loopback address and no api.tokens are configured: "+
			"anyone who can reach it could read and change state; add tokens or listen on 127.0.0.1", a.Listen)
	}
	if (a.TLS.CertFile == "") != (a.TLS.KeyFile == "") {
		p.addOnce("api.tls", "cert_file and key_file must be set together")
	}
	names := map[string]bool{}
	secrets := map[string]bool{}
	for i, t := range a.Tokens {
		key := fmt.Sprintf("api.tokens[%d]", i)
		if t.Name == "" {
			p.addOnce(key+".name", "required")
		} else if names[t.Name] {
			p.addOnce(key+".name", "duplicate token name %q", t.Name)
		}
		names[t.Name] = true
		switch {
		case t.TokenFile != "" && t.Token == "":
			p.addOnce(key+".token_file", "%s was not read: load the config with config.Load", t.TokenFile)
		case len(t.Token) < MinTokenLength:
			p.addOnce(key+".token", "must be at least %d characters", MinTokenLength)
		case secrets[t.Token]:
			p.addOnce(key+".token", "same secret as an earlier token")
		}
		if t.Token != "" {
			secrets[t.Token] = true
		}
		p.oneOf(key+".role", t.Role, Roles...)
		if _, err := t.Expiry(); err != nil {
			p.addOnce(key+".expires_at", "must be an RFC 3339 time like \"2027-01-31T00:00:00Z\", got %q", t.ExpiresAt)
		}
	}
	positive(p, "api.request_timeout", a.RequestTimeout)
	positive(p, "api.read_header_timeout", a.ReadHeaderTimeout)
	positive(p, "api.idle_timeout", a.IdleTimeout)
	positive(p, "api.shutdown_timeout", a.ShutdownTimeout)
	if a.MaxBodyBytes < 1<<10 {
		p.addOnce("api.max_body_bytes", "must be at least 1KiB, got %s", a.MaxBodyBytes)
	}
}

// IsLoopback reports whether host (from host:port) names only the loopback
// interface. An empty host or an unspecified address (0.0.0.0, ::) listens
// on every interface and is not loopback.
func IsLoopback(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

func positive(p *problems, key string, d time.Duration) {
	if d <= 0 {
		p.addOnce(key, "must be a positive duration like \"30s\", got %s", d)
	}
}

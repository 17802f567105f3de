package config

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// FuzzLoad feeds arbitrary bytes as the YAML file: Load must never panic,
// and must either return a valid Config or a *ValidationError.
func FuzzLoad(f *testing.F) {
	for _, s := range []string{
		"", "api:\n  listen: 127.0.0.1:7070\n", "api: 5", "data: [1, 2]",
		"api:\n  tokens:\n    - {name: a, token: 0123456789abcdef, role: read}\n",
		"api:\n  max_body_bytes: 4MiB\n  request_timeout: 1h\n",
		"telemetry:\n  traces:\n    headers: {a: b}\n", "log: {level: [x]}", "\t- x\n", "{{{",
	} {
		f.Add([]byte(s))
	}
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, data []byte) {
		p := filepath.Join(dir, "fuzz.yaml")
		if err := os.WriteFile(p, data, 0o600); err != nil {
			t.Fatal(err)
		}
		cfg, err := Load(Source{File: p, Env: []string{}})
		if err != nil {
			var ve *ValidationError
			if !errors.As(err, &ve) || len(ve.Problems) == 0 {
				t.Fatalf("error is not a ValidationError with problems: %T %v", err, err)
			}
			return
		}
		if err := cfg.Validate(); err != nil {
			t.Fatalf("Load returned a config that does not validate: %v", err)
		}
	})
}

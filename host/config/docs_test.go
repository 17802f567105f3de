package config

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/knadh/koanf/parsers/yaml"
	"github.com/knadh/koanf/providers/file"
	"github.com/knadh/koanf/v2"
)

// keyPaths lists every option's key path; list elements appear as
// "tokens[].name".
func keyPaths(prefix string, t reflect.Type) []string {
	var out []string
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		tag := strings.Split(f.Tag.Get("koanf"), ",")[0]
		if tag == "" || tag == "-" {
			continue
		}
		key := join(prefix, tag)
		switch {
		case f.Type.Kind() == reflect.Struct:
			out = append(out, keyPaths(key, f.Type)...)
		case f.Type.Kind() == reflect.Slice && f.Type.Elem().Kind() == reflect.Struct:
			out = append(out, key)
			out = append(out, keyPaths(key+"[]", f.Type.Elem())...)
		default:
			out = append(out, key)
		}
	}
	return out
}

// TestEveryOptionDocumented keeps docs/config.md and examples/hostd.yaml
// complete: each option's key path is in the reference table, and the
// example sets every option (list elements excepted).
func TestEveryOptionDocumented(t *testing.T) {
	doc, err := os.ReadFile(filepath.Join("..", "..", "docs", "config.md"))
	if err != nil {
		t.Fatal(err)
	}
	k := koanf.New(".")
	if err := k.Load(file.Provider(filepath.Join("..", "..", "examples", "hostd.yaml")), yaml.Parser()); err != nil {
		t.Fatal(err)
	}
	for _, key := range keyPaths("", reflect.TypeOf(Config{})) {
		if !strings.Contains(string(doc), "`"+key+"`") {
			t.Errorf("docs/config.md does not document `%s` (add a row: key, default, env %s, meaning)", key, EnvName(key))
		}
		if !strings.Contains(key, "[]") && !k.Exists(key) {
			t.Errorf("examples/hostd.yaml does not set %s (add it with its default and a comment)", key)
		}
	}
}

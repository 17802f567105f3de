package config

import (
	"errors"
	"fmt"
	"os"
	"reflect"
	"sort"
	"strings"
	"time"

	"github.com/go-viper/mapstructure/v2"
	"github.com/knadh/koanf/parsers/yaml"
	"github.com/knadh/koanf/providers/env/v2"
	"github.com/knadh/koanf/providers/file"
	"github.com/knadh/koanf/v2"
)

// EnvPrefix starts every environment variable read by Load.
const EnvPrefix = "HOSTD_"

// Source says where Load reads configuration from.
type Source struct {
	// File is a YAML file; empty means none.
	File string
	// Env is the environment as KEY=VALUE strings; nil means os.Environ().
	Env []string
	// Flags are overrides by key path (e.g. "api.listen"), applied last.
	Flags map[string]any
}

// Load builds a Config from the defaults, then src.File, then HOSTD_*
// environment variables, then src.Flags, and validates it. Every problem
// (parse errors, unknown keys, wrong types, invalid values) is reported at
// once in a *ValidationError.
func Load(src Source) (*Config, error) {
	var p problems
	k := koanf.New(".")
	if src.File != "" {
		if err := k.Load(file.Provider(src.File), yaml.Parser()); err != nil {
			return nil, &ValidationError{Problems: []Problem{{Key: src.File, Message: cleanFileError(err)}}}
		}
	}
	environ := src.Env
	if environ == nil {
		environ = os.Environ()
	}
	envNames := map[string]string{} // key path -> variable name, for messages
	if err := k.Load(env.Provider(".", env.Opt{
		Prefix:      EnvPrefix,
		EnvironFunc: func() []string { return environ },
		TransformFunc: func(name, v string) (string, any) {
			key, ok := EnvKey(name)
			if !ok {
				return "", nil
			}
			envNames[key] = name
			return key, v
		},
	}), nil); err != nil {
		p.add("environment", "%v", err)
	}
	for key, v := range src.Flags {
		if err := k.Set(key, v); err != nil {
			p.add(key, "%v", err)
		}
	}

	cfg := Default()
	checkKeys(&p, "", k.Raw(), reflect.TypeOf(cfg), envNames)
	decode(&p, k, &cfg)
	cfg.API.readTokenFiles(&p)
	cfg.validate(&p)
	if err := p.err(); err != nil {
		return nil, err
	}
	return &cfg, nil
}

// EnvKey maps an environment variable name to a key path:
// HOSTD_API__LISTEN -> "api.listen". It returns false for names that are
// not config keys (no "__" after the prefix, e.g. HOSTD_ADDR).
func EnvKey(name string) (string, bool) {
	rest, ok := strings.CutPrefix(name, EnvPrefix)
	if !ok || !strings.Contains(rest, "__") {
		return "", false
	}
	return strings.ToLower(strings.ReplaceAll(rest, "__", ".")), true
}

// EnvName maps a key path to its environment variable: "api.listen" ->
// "HOSTD_API__LISTEN".
func EnvName(key string) string {
	return EnvPrefix + strings.ToUpper(strings.ReplaceAll(key, ".", "__"))
}

func cleanFileError(err error) string {
	var pe *os.PathError
	if errors.As(err, &pe) {
		return fmt.Sprintf("cannot read config file: %v", pe.Err)
	}
	return fmt.Sprintf("cannot parse YAML: %v", err)
}

// timeToString turns a YAML timestamp (an unquoted
// 2027-01-31T00:00:00Z) into RFC 3339 text for a string option.
func timeToString(from, to reflect.Type, data any) (any, error) {
	if t, ok := data.(time.Time); ok && to.Kind() == reflect.String {
		return t.Format(time.RFC3339Nano), nil
	}
	return data, nil
}

// decode copies k onto cfg (which holds the defaults), recording every type
// error with its key path.
func decode(p *problems, k *koanf.Koanf, cfg *Config) {
	dc := &mapstructure.DecoderConfig{
		TagName:          "koanf",
		WeaklyTypedInput: true,
		Result:           cfg,
		DecodeHook: mapstructure.ComposeDecodeHookFunc(
			mapstructure.StringToTimeDurationHookFunc(),
			mapstructure.TextUnmarshallerHookFunc(),
			timeToString, // an unquoted YAML timestamp into a string option (expires_at)
		),
	}
	err := k.UnmarshalWithConf("", cfg, koanf.UnmarshalConf{Tag: "koanf", DecoderConfig: dc})
	for _, e := range flatten(err) {
		var de *mapstructure.DecodeError
		if errors.As(e, &de) {
			if p.seen[de.Name()] {
				continue // already reported (e.g. a section that is not a mapping)
			}
			p.add(de.Name(), "%v", de.Unwrap())
			p.mark(de.Name())
			continue
		}
		p.add("config", "%v", e)
	}
}

func flatten(err error) []error {
	if err == nil {
		return nil
	}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		var out []error
		for _, e := range j.Unwrap() {
			out = append(out, flatten(e)...)
		}
		return out
	}
	return []error{err}
}

// checkKeys reports every key in raw that has no field in t.
func checkKeys(p *problems, path string, raw any, t reflect.Type, envNames map[string]string) {
	switch t.Kind() {
	case reflect.Pointer:
		checkKeys(p, path, raw, t.Elem(), envNames)
	case reflect.Struct:
		m, ok := raw.(map[string]any)
		if !ok {
			if raw != nil {
				p.add(path, "must be a mapping of keys, got %s", describe(raw))
				p.mark(path)
			}
			return
		}
		fields := map[string]reflect.StructField{}
		var names []string
		for i := 0; i < t.NumField(); i++ {
			f := t.Field(i)
			if tag := strings.Split(f.Tag.Get("koanf"), ",")[0]; tag != "" && tag != "-" {
				fields[tag] = f
				names = append(names, tag)
			}
		}
		keys := make([]string, 0, len(m))
		for key := range m {
			keys = append(keys, key)
		}
		sort.Strings(keys)
		for _, key := range keys {
			full := join(path, key)
			f, ok := fields[key]
			if !ok {
				msg := "unknown key"
				if s := suggest(key, names); s != "" {
					msg += fmt.Sprintf(" (did you mean %q?)", join(path, s))
				}
				if name, ok := envNames[full]; ok {
					msg += " (from environment variable " + name + ")"
				} else if name := envPrefixOf(full, envNames); name != "" {
					msg += " (from environment variable " + name + ")"
				}
				p.add(full, "%s", msg)
				p.mark(full)
				continue
			}
			checkKeys(p, full, m[key], f.Type, envNames)
		}
	case reflect.Slice:
		if !isStructish(t.Elem()) {
			return
		}
		list, ok := raw.([]any)
		if !ok {
			return // the decoder reports the type error
		}
		for i, e := range list {
			checkKeys(p, fmt.Sprintf("%s[%d]", path, i), e, t.Elem(), envNames)
		}
	case reflect.Map:
		if !isStructish(t.Elem()) {
			return
		}
		if m, ok := raw.(map[string]any); ok {
			for key, v := range m {
				checkKeys(p, join(path, key), v, t.Elem(), envNames)
			}
		}
	}
}

func envPrefixOf(full string, envNames map[string]string) string {
	for key, name := range envNames {
		if strings.HasPrefix(key, full+".") {
			return name
		}
	}
	return ""
}

func isStructish(t reflect.Type) bool {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	return t.Kind() == reflect.Struct
}

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

func describe(v any) string {
	switch v.(type) {
	case []any:
		return "a list"
	case string:
		return "a string"
	default:
		return fmt.Sprintf("%T", v)
	}
}

// suggest returns the known name closest to key, if it is close (at most
// two edits, or equal ignoring "_" and "-").
func suggest(key string, names []string) string {
	norm := func(s string) string {
		return strings.NewReplacer("_", "", "-", "").Replace(strings.ToLower(s))
	}
	best, bestD := "", 3
	for _, n := range names {
		if norm(n) == norm(key) {
			return n
		}
		if d := editDistance(key, n); d < bestD && d < len(key) {
			best, bestD = n, d
		}
	}
	return best
}

func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

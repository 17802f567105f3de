package layers

import (
	"fmt"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
)

// Violation is one forbidden import.
type Violation struct {
	File   string // relative to the module root
	Pkg    string // importing package, relative to the module ("builtin/locks")
	Import string // imported path
	Rule   string // why it is forbidden
}

func (v Violation) String() string {
	return fmt.Sprintf("%s: %s imports %q: %s", v.File, v.Pkg, v.Import, v.Rule)
}

// thirdParty limits who may import a dependency: import-path prefix ->
// module-relative package prefixes allowed to import it.
var thirdParty = []struct {
	prefix  string
	allowed []string
	why     string
}{
	{"github.com/dgraph-io/badger", []string{"runtime/catalog"}, "badger is imported only by runtime/catalog (the catalog is the one door to durable state)"},
	{"github.com/tetratelabs/wazero", []string{"runtime/wasm"}, "wazero is imported only by runtime/wasm"},
	{"github.com/knadh/koanf", []string{"host/config"}, "koanf is imported only by host/config"},
	{"github.com/go-viper/mapstructure", []string{"host/config"}, "mapstructure (koanf's decoder) is imported only by host/config"},
	{"go.opentelemetry.io/otel/sdk", []string{"host/telemetry"}, "the OTel SDK is wired only by host/telemetry; other packages use the OTel API and receive providers"},
	{"go.opentelemetry.io/otel/exporters", []string{"host/telemetry"}, "OTel exporters are built only by host/telemetry"},
	{"github.com/prometheus/", []string{"host/telemetry"}, "Prometheus is reached only through host/telemetry's OTel exporter"},
	{"github.com/spf13/", []string{"cmd/"}, "cobra/pflag belong to the CLI (cmd/hostd)"},
	{"github.com/getkin/kin-openapi", []string{"internal/apispec"}, "kin-openapi (test-only: the spec validator) is imported only by internal/apispec"},
	{"go.etcd.io/etcd/server", []string{"internal/etcdtest", "cmd/hostd-devcluster"}, "the etcd server is started only by tests (internal/etcdtest) and the dev cluster's binary"},
	{"go.etcd.io/etcd/", []string{"runtime/catalog/etcdcat", "host/cluster", "internal/etcdtest", "internal/etcdcattest", "cmd/hostd-devcluster"}, "the etcd client is used only by the etcd catalog (runtime/catalog/etcdcat) and the election (host/cluster)"},
	{"github.com/nats-io/nats-server", []string{"internal/natstest", "cmd/hostd-devcluster"}, "nats-server is started only by tests (internal/natstest) and the dev cluster's binary"},
	{"github.com/nats-io/", []string{"runtime/wal/jswal", "internal/natstest", "cmd/hostd-devcluster"}, "the NATS client is used only by the JetStream WAL (runtime/wal/jswal)"},
	{"go.opentelemetry.io/collector/pdata", []string{"host/telemetry", "host/tracestore", "cmd/"}, "pdata (OTLP-JSON trace files) is used only by host/telemetry, host/tracestore and the CLI"},
}

// otelAPI reports whether p is part of the OpenTelemetry API (allowed in
// the runtime and builtin layers).
func otelAPI(p string) bool {
	if p == "go.opentelemetry.io/otel" {
		return true
	}
	rest, ok := strings.CutPrefix(p, "go.opentelemetry.io/otel/")
	if !ok {
		return false
	}
	for _, a := range []string{"attribute", "baggage", "codes", "metric", "propagation", "trace"} {
		if rest == a || strings.HasPrefix(rest, a+"/") {
			return true
		}
	}
	return false
}

// runtimeRank orders the runtime packages: one may import only lower ranks.
var runtimeRank = map[string]int{
	"runtime/sched":     0,
	"runtime/failpoint": 0,
	"runtime/catalog":   1,
	"runtime/wal":       2,
	"runtime/wasm":      2,
}

// unit is the first two path elements ("builtin/locks", "runtime/wasm"):
// packages below one unit may import each other.
func unit(rel string) string {
	parts := strings.SplitN(rel, "/", 3)
	if len(parts) >= 2 {
		return parts[0] + "/" + parts[1]
	}
	return rel
}

func layer(rel string) string {
	switch {
	case rel == "sdk/abi" || strings.HasPrefix(rel, "sdk/abi/"):
		return "contract"
	case rel == "wire" || strings.HasPrefix(rel, "wire/") || rel == "docs":
		return "wire"
	case rel == "sdk" || strings.HasPrefix(rel, "sdk/") || strings.HasPrefix(rel, "plugins/"):
		return "guest"
	case strings.HasPrefix(rel, "runtime/"):
		return "runtime"
	case strings.HasPrefix(rel, "builtin/"):
		return "builtin"
	case rel == "host" || strings.HasPrefix(rel, "host/"):
		return "host"
	}
	return "edge" // client, cmd, examples, internal, the module root
}

// checkImport returns why pkg (module-relative) may not import imp, or "".
func checkImport(module, pkg, imp string) string {
	std := !strings.Contains(strings.SplitN(imp, "/", 2)[0], ".")
	own := imp == module || strings.HasPrefix(imp, module+"/")
	var target string
	if own {
		target = strings.TrimPrefix(strings.TrimPrefix(imp, module), "/")
	}
	if !std && !own {
		for _, tp := range thirdParty {
			if strings.HasPrefix(imp, tp.prefix) && !hasPrefixAny(pkg, tp.allowed) {
				return tp.why
			}
		}
	}
	switch layer(pkg) {
	case "contract":
		if !std {
			return "sdk/abi is the contract layer: standard library only"
		}
	case "wire":
		if !std {
			return "wire (the API's JSON types) is a leaf: standard library only, so the client does not build the daemon"
		}
	case "guest":
		if std {
			return ""
		}
		if !own || (target != "sdk" && !strings.HasPrefix(target, "sdk/")) {
			return "guest code (sdk/, plugins/) may import only the standard library and sdk/..."
		}
	case "runtime":
		if std || otelAPI(imp) {
			return ""
		}
		if !own {
			if strings.HasPrefix(imp, "go.opentelemetry.io/") {
				return "the runtime layer uses only the OTel API"
			}
			return "" // badger/wazero were checked above
		}
		if target == "sdk/abi" || unit(target) == unit(pkg) {
			return ""
		}
		if !strings.HasPrefix(target, "runtime/") {
			return "the runtime layer imports only sdk/abi and lower runtime packages"
		}
		mine, ok1 := runtimeRank[unit(pkg)]
		theirs, ok2 := runtimeRank[unit(target)]
		if !ok1 {
			mine = 3
		}
		if !ok2 {
			theirs = 3
		}
		if theirs >= mine {
			return fmt.Sprintf("runtime order is sched, failpoint < catalog < wal, wasm: %s may not import %s", unit(pkg), unit(target))
		}
	case "builtin":
		if std || otelAPI(imp) {
			return ""
		}
		if !own {
			if strings.HasPrefix(imp, "go.opentelemetry.io/") {
				return "builtins use only the OTel API"
			}
			return ""
		}
		switch {
		case unit(target) == unit(pkg), target == "sdk/abi", strings.HasPrefix(target, "runtime/"):
			return ""
		case strings.HasPrefix(target, "builtin/"):
			return "a builtin never imports another builtin: declare the small interface you need and let host/ adapt"
		}
		return "builtins import only runtime/..., sdk/abi and the OTel API"
	case "host":
		if own && (strings.HasPrefix(target, "cmd/") || target == "client" || strings.HasPrefix(target, "client/")) {
			return "host may not import the edges (client, cmd)"
		}
	}
	if own && layer(pkg) != "edge" && (strings.HasPrefix(target, "cmd/") || strings.HasPrefix(target, "examples/")) {
		return "nothing imports cmd/ or examples/"
	}
	return ""
}

func hasPrefixAny(s string, prefixes []string) bool {
	for _, p := range prefixes {
		if s == strings.TrimSuffix(p, "/") || strings.HasPrefix(s, strings.TrimSuffix(p, "/")+"/") {
			return true
		}
	}
	return false
}

// Check parses every non-test Go file under root (a module root with a
// go.mod) and returns the forbidden imports. Nested modules (a directory
// with its own go.mod, such as bench/) and testdata are skipped.
func Check(root string) ([]Violation, error) {
	modBytes, err := os.ReadFile(filepath.Join(root, "go.mod"))
	if err != nil {
		return nil, err
	}
	module := ""
	for _, line := range strings.Split(string(modBytes), "\n") {
		if m, ok := strings.CutPrefix(strings.TrimSpace(line), "module "); ok {
			module = strings.Trim(strings.TrimSpace(m), `"`)
			break
		}
	}
	if module == "" {
		return nil, fmt.Errorf("layers: no module line in %s/go.mod", root)
	}
	type imp struct {
		file, path string
	}
	pkgs := map[string][]imp{} // package -> its imports
	fset := token.NewFileSet()
	err = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			name := d.Name()
			if p != root && (name == "testdata" || name == "vendor" || strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_")) {
				return filepath.SkipDir
			}
			if p != root {
				if _, err := os.Stat(filepath.Join(p, "go.mod")); err == nil {
					return filepath.SkipDir // its own module (bench/)
				}
			}
			return nil
		}
		if !strings.HasSuffix(p, ".go") || strings.HasSuffix(p, "_test.go") {
			return nil
		}
		rel, _ := filepath.Rel(root, p)
		rel = filepath.ToSlash(rel)
		f, err := parser.ParseFile(fset, p, nil, parser.ImportsOnly|parser.ParseComments)
		if err != nil {
			return fmt.Errorf("layers: %w", err)
		}
		if isIgnored(f.Name.Name, p) {
			return nil
		}
		pkg := path.Dir(rel)
		if pkg == "." {
			pkg = ""
		}
		if _, ok := pkgs[pkg]; !ok {
			pkgs[pkg] = nil
		}
		for _, is := range f.Imports {
			ip, _ := strconv.Unquote(is.Path.Value)
			pkgs[pkg] = append(pkgs[pkg], imp{file: rel, path: ip})
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	var out []Violation
	for pkg, imps := range pkgs {
		guest := false // an examples/ package importing the SDK is guest code
		if strings.HasPrefix(pkg, "examples/") {
			for _, i := range imps {
				if i.path == module+"/sdk" || strings.HasPrefix(i.path, module+"/sdk/") {
					guest = true
				}
			}
		}
		for _, i := range imps {
			why := checkImport(module, pkg, i.path)
			if why == "" && guest {
				why = checkGuest(module, i.path, "guest code in examples/ (it imports the SDK)")
			}
			if why != "" {
				out = append(out, Violation{File: i.file, Pkg: pkg, Import: i.path, Rule: why})
			}
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].String() < out[j].String() })
	return out, nil
}

// checkGuest allows only the standard library and sdk/... .
func checkGuest(module, imp, who string) string {
	if !strings.Contains(strings.SplitN(imp, "/", 2)[0], ".") {
		return ""
	}
	if imp == module+"/sdk" || strings.HasPrefix(imp, module+"/sdk/") {
		return ""
	}
	return who + " may import only the standard library and sdk/..."
}

// isIgnored skips files excluded from every build (//go:build ignore).
func isIgnored(pkgName, file string) bool {
	if pkgName == "documentation" {
		return true
	}
	b, err := os.ReadFile(file)
	if err != nil {
		return false
	}
	for _, line := range strings.Split(string(b), "\n") {
		line = strings.TrimSpace(line)
		if strings.HasPrefix(line, "package ") {
			break
		}
		if line == "//go:build ignore" {
			return true
		}
	}
	return false
}

package scaffold

import (
	"bufio"
	"bytes"
	"context"
	"embed"
	"errors"
	"fmt"
	"go/format"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"text/template"
)

// HostdModule is the module path of hostd, the one the scaffold requires.
const HostdModule = "github.com/hostd-dev/hostd"

// GoVersion is the go directive written into a new plugin's go.mod.
const GoVersion = "1.26.0"

//go:embed templates/*.tmpl
var templates embed.FS

// Errors returned by New, FindCheckout and Build.
var (
	// ErrName: the plugin name is not usable.
	ErrName = errors.New("scaffold: invalid plugin name")
	// ErrExists: the target directory exists and is not empty.
	ErrExists = errors.New("scaffold: directory not empty")
	// ErrNoCheckout: no hostd checkout could be found; pass --sdk.
	ErrNoCheckout = errors.New("scaffold: no hostd checkout found")
	// ErrBuild: go build failed, or its output is not an ABI v1 plugin.
	ErrBuild = errors.New("scaffold: build failed")
)

// MaxNameLen is the longest plugin name New accepts.
const MaxNameLen = 64

// ValidName checks a plugin name: 1..64 of lower-case letters, digits and
// '-', starting with a letter (it becomes the .wasm file name, hostd's
// plugin name, the Go module path and part of the message type).
func ValidName(name string) error {
	if name == "" || len(name) > MaxNameLen {
		return fmt.Errorf("%w: %q: want 1..%d characters", ErrName, name, MaxNameLen)
	}
	if name[0] < 'a' || name[0] > 'z' {
		return fmt.Errorf("%w: %q: must start with a lower-case letter", ErrName, name)
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-') {
			return fmt.Errorf("%w: %q: character %q not allowed (use a-z 0-9 -)", ErrName, name, c)
		}
	}
	return nil
}

// MessageType derives the scaffold's example message type from the plugin
// name: "audit-log" -> "AuditLogNote".
func MessageType(name string) string {
	var b strings.Builder
	for _, part := range strings.Split(name, "-") {
		if part == "" {
			continue
		}
		b.WriteString(strings.ToUpper(part[:1]) + part[1:])
	}
	b.WriteString("Note")
	return b.String()
}

// Options configure New.
type Options struct {
	// Name of the plugin (see ValidName). Required.
	Name string
	// Dir to create; default ./<Name>. It must not exist or be empty.
	Dir string
	// SDKPath is the hostd checkout for the replace directive; default
	// FindCheckout().
	SDKPath string
}

// Validate reports every problem with o at once.
func (o Options) Validate() error {
	return ValidName(o.Name)
}

type data struct {
	Name, Module, MessageType, SDKPath, GoVersion string
}

// files maps template names to output names.
var files = []struct{ tmpl, out string }{
	{"go.mod.tmpl", "go.mod"},
	{"main.go.tmpl", "main.go"},
	{"main_test.go.tmpl", "main_test.go"},
	{"README.md.tmpl", "README.md"},
	{"gitignore.tmpl", ".gitignore"},
}

// New writes a plugin project and returns its absolute directory.
func New(o Options) (string, error) {
	if err := o.Validate(); err != nil {
		return "", err
	}
	dir := o.Dir
	if dir == "" {
		dir = o.Name
	}
	dir, err := filepath.Abs(dir)
	if err != nil {
		return "", err
	}
	sdk := o.SDKPath
	if sdk == "" {
		if sdk, err = FindCheckout(); err != nil {
			return "", err
		}
	} else if err := checkCheckout(sdk); err != nil {
		return "", err
	}
	if sdk, err = filepath.Abs(sdk); err != nil {
		return "", err
	}
	if ents, err := os.ReadDir(dir); err == nil && len(ents) > 0 {
		return "", fmt.Errorf("%w: %s", ErrExists, dir)
	} else if err != nil && !errors.Is(err, os.ErrNotExist) {
		return "", err
	}
	d := data{
		Name: o.Name, Module: o.Name, MessageType: MessageType(o.Name),
		SDKPath: filepath.ToSlash(sdk), GoVersion: GoVersion,
	}
	// Render everything before writing anything.
	out := make([][]byte, len(files))
	for i, f := range files {
		t, err := template.ParseFS(templates, "templates/"+f.tmpl)
		if err != nil {
			return "", err
		}
		var buf bytes.Buffer
		if err := t.Execute(&buf, d); err != nil {
			return "", err
		}
		out[i] = buf.Bytes()
		if strings.HasSuffix(f.out, ".go") {
			// Generated code is gofmt-clean whatever the template's spacing.
			if out[i], err = format.Source(out[i]); err != nil {
				return "", fmt.Errorf("scaffold: template %s: %w", f.tmpl, err)
			}
		}
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	for i, f := range files {
		if err := os.WriteFile(filepath.Join(dir, f.out), out[i], 0o644); err != nil {
			return "", err
		}
	}
	return dir, nil
}

// checkCheckout verifies that dir holds hostd's go.mod and its SDK.
func checkCheckout(dir string) error {
	f, err := os.Open(filepath.Join(dir, "go.mod"))
	if err != nil {
		return fmt.Errorf("%w: %s: %v", ErrNoCheckout, dir, err)
	}
	defer f.Close()
	sc := bufio.NewScanner(io.LimitReader(f, 1<<20))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if mod, ok := strings.CutPrefix(line, "module "); ok {
			if strings.Trim(strings.TrimSpace(mod), `"`) != HostdModule {
				return fmt.Errorf("%w: %s is module %s, not %s", ErrNoCheckout, dir, mod, HostdModule)
			}
			if _, err := os.Stat(filepath.Join(dir, "sdk", "doc.go")); err != nil {
				return fmt.Errorf("%w: %s has no sdk/ package", ErrNoCheckout, dir)
			}
			return nil
		}
	}
	return fmt.Errorf("%w: %s/go.mod has no module line", ErrNoCheckout, dir)
}

// FindCheckout locates a hostd checkout: first the source tree this binary
// was compiled from (Go records source paths unless built with -trimpath),
// then a directory enclosing the working directory.
func FindCheckout() (string, error) {
	var tried []string
	if _, file, _, ok := runtime.Caller(0); ok && filepath.IsAbs(file) {
		// file is <checkout>/internal/scaffold/scaffold.go
		dir := filepath.Dir(filepath.Dir(filepath.Dir(file)))
		if checkCheckout(dir) == nil {
			return dir, nil
		}
		tried = append(tried, dir)
	}
	if wd, err := os.Getwd(); err == nil {
		for dir := wd; ; dir = filepath.Dir(dir) {
			if checkCheckout(dir) == nil {
				return dir, nil
			}
			if filepath.Dir(dir) == dir {
				break
			}
		}
		tried = append(tried, wd+" and its parents")
	}
	return "", fmt.Errorf("%w (looked at %s); pass --sdk PATH to a hostd checkout", ErrNoCheckout, strings.Join(tried, ", "))
}

// BuildOptions configure Build.
type BuildOptions struct {
	// Dir is the plugin's package directory. Required.
	Dir string
	// Out is the .wasm file to write; default ./<base of Dir>.wasm.
	Out string
	// Go is the go command; default "go" from PATH.
	Go string
	// Stdout and Stderr receive go build's output (default discarded into
	// the returned error).
	Stdout, Stderr io.Writer
}

// BuildCommand returns the documented build line for dir and out.
func BuildCommand(goCmd, out string) []string {
	return []string{goCmd, "build", "-buildmode=c-shared", "-o", out, "."}
}

// Build compiles the plugin in o.Dir to WebAssembly and checks that the
// result declares ABI v1. It returns the absolute path of the .wasm file.
func Build(ctx context.Context, o BuildOptions) (string, error) {
	if o.Dir == "" {
		return "", fmt.Errorf("%w: no plugin directory", ErrBuild)
	}
	dir, err := filepath.Abs(o.Dir)
	if err != nil {
		return "", err
	}
	if st, err := os.Stat(dir); err != nil || !st.IsDir() {
		return "", fmt.Errorf("%w: %s is not a directory", ErrBuild, o.Dir)
	}
	out := o.Out
	if out == "" {
		out = filepath.Base(dir) + ".wasm"
	}
	if out, err = filepath.Abs(out); err != nil {
		return "", err
	}
	goCmd := o.Go
	if goCmd == "" {
		goCmd = "go"
	}
	args := BuildCommand(goCmd, out)
	cmd := exec.CommandContext(ctx, args[0], args[1:]...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOOS=wasip1", "GOARCH=wasm")
	var captured bytes.Buffer
	cmd.Stdout, cmd.Stderr = o.Stdout, o.Stderr
	if cmd.Stdout == nil {
		cmd.Stdout = &captured
	}
	if cmd.Stderr == nil {
		cmd.Stderr = &captured
	}
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("%w: GOOS=wasip1 GOARCH=wasm %s (in %s): %v\n%s", ErrBuild, strings.Join(args, " "), dir, err, captured.Bytes())
	}
	if err := CheckModule(out); err != nil {
		return "", err
	}
	return out, nil
}

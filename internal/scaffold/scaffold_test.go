package scaffold

import (
	"bytes"
	"context"
	"errors"
	"go/format"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestValidName(t *testing.T) {
	for _, n := range []string{"a", "audit-log", "p2", strings.Repeat("x", 64)} {
		if err := ValidName(n); err != nil {
			t.Errorf("%q: %v", n, err)
		}
	}
	for _, n := range []string{"", "A", "2p", "a_b", "a/b", "a.b", strings.Repeat("x", 65)} {
		if err := ValidName(n); !errors.Is(err, ErrName) {
			t.Errorf("%q: err = %v", n, err)
		}
	}
	if got := MessageType("audit-log"); got != "AuditLogNote" {
		t.Fatalf("MessageType = %q", got)
	}
}

func TestFindCheckout(t *testing.T) {
	dir, err := FindCheckout()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "sdk", "sdktest")); err != nil {
		t.Fatalf("checkout %s: %v", dir, err)
	}
	if err := checkCheckout(t.TempDir()); !errors.Is(err, ErrNoCheckout) {
		t.Fatalf("empty dir accepted: %v", err)
	}
}

func TestNewRefusesNonEmptyDir(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "x"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := New(Options{Name: "p", Dir: dir}); !errors.Is(err, ErrExists) {
		t.Fatalf("err = %v", err)
	}
	if _, err := New(Options{Name: "p", Dir: t.TempDir(), SDKPath: t.TempDir()}); !errors.Is(err, ErrNoCheckout) {
		t.Fatalf("bad --sdk accepted: %v", err)
	}
}

// TestScaffoldOutsideRepo is the plugin author's journey minus hostd:
// scaffold into a directory outside the checkout, run the scaffold's own
// tests, build it to Wasm. (Loading the result in runtime/wasm is tested
// in cmd/hostd's plugin_scaffold_test.go.)
func TestScaffoldOutsideRepo(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a module (-short)")
	}
	root, err := FindCheckout()
	if err != nil {
		t.Fatal(err)
	}
	parent := t.TempDir()
	if strings.HasPrefix(parent, root) {
		t.Fatalf("temp dir %s is inside the checkout %s", parent, root)
	}
	dir, err := New(Options{Name: "audit-log", Dir: filepath.Join(parent, "audit-log")})
	if err != nil {
		t.Fatal(err)
	}
	gomod, _ := os.ReadFile(filepath.Join(dir, "go.mod"))
	if !strings.Contains(string(gomod), "replace github.com/hostd-dev/hostd => "+filepath.ToSlash(root)) {
		t.Fatalf("go.mod:\n%s", gomod)
	}
	for _, f := range []string{"main.go", "main_test.go"} {
		b, err := os.ReadFile(filepath.Join(dir, f))
		if err != nil {
			t.Fatal(err)
		}
		if formatted, err := format.Source(b); err != nil || !bytes.Equal(formatted, b) {
			t.Errorf("%s is not gofmt-clean (%v)", f, err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute) // cold go test and three builds on a loaded machine
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", "test", "-count=1", "./...")
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go test in scaffold: %v\n%s", err, out)
	}
	out, err := Build(ctx, BuildOptions{Dir: dir, Out: filepath.Join(parent, "out", "audit-log.wasm")})
	if err != nil {
		t.Fatal(err)
	}
	if err := CheckModule(out); err != nil {
		t.Fatal(err)
	}
	// A non-plugin Go program builds but is refused.
	plain := filepath.Join(parent, "plain")
	if err := os.MkdirAll(plain, 0o755); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(plain, "go.mod"), []byte("module plain\n\ngo 1.26.0\n"), 0o644)
	os.WriteFile(filepath.Join(plain, "main.go"), []byte("package main\n\nfunc main() {}\n"), 0o644)
	if _, err := Build(ctx, BuildOptions{Dir: plain, Out: filepath.Join(parent, "plain.wasm")}); !errors.Is(err, ErrBuild) || !strings.Contains(err.Error(), "hostd_abi_v1") {
		t.Fatalf("plain program: %v", err)
	}
	// A compile error is reported with the compiler's output.
	os.WriteFile(filepath.Join(plain, "main.go"), []byte("package main\n\nfunc main() { undefinedThing() }\n"), 0o644)
	if _, err := Build(ctx, BuildOptions{Dir: plain, Out: filepath.Join(parent, "plain.wasm")}); !errors.Is(err, ErrBuild) || !strings.Contains(err.Error(), "undefinedThing") {
		t.Fatalf("compile error: %v", err)
	}
}

func TestExports(t *testing.T) {
	// (module (func) (export "hostd_abi_v1" (func 0)) (memory 1) (export "memory" (memory 0)))
	mod := []byte("\x00asm\x01\x00\x00\x00" +
		"\x01\x04\x01\x60\x00\x00" + // type section: () -> ()
		"\x03\x02\x01\x00" + // function section
		"\x05\x03\x01\x00\x01" + // memory section
		"\x07\x19\x02" + // export section, 2 exports
		"\x0chostd_abi_v1\x00\x00" +
		"\x06memory\x02\x00" +
		"\x0a\x04\x01\x02\x00\x0b") // code section
	got, err := Exports(mod)
	if err != nil || len(got) != 2 || got[0] != "hostd_abi_v1" || got[1] != "memory" {
		t.Fatalf("Exports = %q, %v", got, err)
	}
	for i := 0; i < len(mod); i++ {
		_, _ = Exports(mod[:i]) // must not panic
	}
	if _, err := Exports([]byte("\x7fELF....")); err == nil {
		t.Fatal("ELF accepted")
	}
}

func FuzzExports(f *testing.F) {
	f.Add([]byte("\x00asm\x01\x00\x00\x00\x07\x05\x01\x01x\x00\x00"))
	f.Add([]byte("\x00asm\x01\x00\x00\x00"))
	f.Fuzz(func(t *testing.T, b []byte) {
		names, err := Exports(b)
		if err == nil && len(names) > len(b) {
			t.Fatalf("%d names from %d bytes", len(names), len(b))
		}
	})
}

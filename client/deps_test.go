package client

import (
	"os/exec"
	"strings"
	"testing"
)

// TestClientDependsOnWireOnly: a program that imports the client builds
// the standard library, package wire and the client, nothing else (no
// storage engine, Wasm runtime or telemetry SDK, which the client pulled
// in through builtin/mapping before the wire types moved to a leaf
// package).
func TestClientDependsOnWireOnly(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps: %v\n%s", err, out)
	}
	const module = "github.com/hostd-dev/hostd"
	allowed := map[string]bool{module + "/wire": true, module + "/client": true}
	n := 0
	for _, p := range strings.Fields(string(out)) {
		first, _, _ := strings.Cut(p, "/")
		std := !strings.Contains(first, ".") && first != "vendor" || strings.HasPrefix(p, "vendor/golang.org/x/")
		if std || allowed[p] {
			n++
			continue
		}
		t.Errorf("client depends on %s: the client may import only the standard library and %s/wire", p, module)
	}
	if n == 0 {
		t.Fatalf("go list -deps printed no packages:\n%s", out)
	}
}

package wasmtest

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestBuildIsCached(t *testing.T) {
	pkg := filepath.Join(Root(), "runtime", "wasm", "testdata", "echo2")
	p1 := Build(t, pkg)
	start := time.Now()
	p2 := Build(t, pkg)
	if p1 != p2 || time.Since(start) > time.Second {
		t.Fatalf("second build not cached: %s vs %s in %v", p1, p2, time.Since(start))
	}
	if st, err := os.Stat(p1); err != nil || st.Size() < 1000 {
		t.Fatalf("built file: %v %v", st, err)
	}
	if st, err := os.Stat(CacheDir()); err != nil || !st.IsDir() {
		t.Fatalf("cache dir: %v", err)
	}
}

func TestKeyFollowsContent(t *testing.T) {
	dir := t.TempDir()
	write := func(s string) {
		if err := os.WriteFile(filepath.Join(dir, "main.go"), []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("package main\n")
	k1, err := hashInputs(dir)
	if err != nil {
		t.Fatal(err)
	}
	write("package main // changed\n")
	k2, _ := hashInputs(dir)
	write("package main\n")
	k3, _ := hashInputs(dir)
	if k1 == k2 || k1 != k3 {
		t.Fatalf("keys %s %s %s: must change with content and only with it", k1[:8], k2[:8], k3[:8])
	}
}

func TestBuildErrorCarriesCompilerOutput(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "broken")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "main.go"), []byte("package main\nfunc main() { undefinedThing() }\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := BuildErr(dir)
	if err == nil || !strings.Contains(err.Error(), "wasmtest: build") {
		t.Fatalf("err = %v", err)
	}
}

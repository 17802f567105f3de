package wasmtest

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestBuildIsCached(t *testing.T) {
	pkg := filepath.Join(Root(), "runtime", "wasm", "testdata", "echo2")
	p1 := Build(t, pkg)
	st1, err := os.Stat(p1)
	if err != nil || st1.Size() < 1000 {
		t.Fatalf("built file: %v %v", st1, err)
	}
	p2 := Build(t, pkg)
	// Not rebuilt: a build writes a new file and renames it over the old
	// one. (Not a timing bound: hashing the inputs alone can take a
	// second under -race on a loaded machine.)
	if st2, err := os.Stat(p2); p1 != p2 || err != nil || !os.SameFile(st1, st2) || !st2.ModTime().Equal(st1.ModTime()) {
		t.Fatalf("second build not cached: %s vs %s (%v)", p1, p2, err)
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

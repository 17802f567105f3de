package wasm

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Precompile fills the compilation cache without starting a plugin (a
// cluster follower warms it so a takeover does not wait for the
// compiler), and names each file it could not compile.
func TestPrecompileFillsTheCache(t *testing.T) {
	dir := t.TempDir()
	copyTo(t, echoWasm(t), dir, "echo.wasm")
	if err := os.WriteFile(filepath.Join(dir, "broken.wasm"), []byte("\x00asm\x01\x00\x00\x00garbage"), 0o644); err != nil {
		t.Fatal(err)
	}
	cache := t.TempDir()
	r, err := Open(Config{Dir: dir, CacheDir: cache, Store: openStore(t), Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	err = r.Precompile(context.Background())
	if err == nil || !strings.Contains(err.Error(), "plugin broken") || strings.Contains(err.Error(), "plugin echo") {
		t.Fatalf("precompile: %v (want only broken named)", err)
	}
	if len(r.List()) != 0 {
		t.Fatalf("precompile started plugins: %+v", r.List())
	}
	n := 0
	_ = filepath.WalkDir(cache, func(_ string, d os.DirEntry, _ error) error {
		if d != nil && !d.IsDir() {
			n++
		}
		return nil
	})
	if n == 0 {
		t.Fatal("the compilation cache is empty after Precompile")
	}
}

// Package wasmtest builds Wasm plugins for tests and shares one wazero
// compilation cache across them.
//
//	path := wasmtest.Build(t, "testdata/trap")  // a Go main package dir
//	rt, _ := wasm.New(wasm.Config{CacheDir: wasmtest.CacheDir(), ...})
//
// Build runs `GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared` (the
// documented plugin build line) and caches the output under os.TempDir(),
// keyed by a hash of the package's files, the SDK's sources and the Go
// version, so repeated tests and repeated test binaries do not rebuild; the
// Go build cache makes a real rebuild cheap too. CacheDir is a wazero
// compilation cache directory shared by every test (a cold compile of a Go
// guest takes ~2 s).
package wasmtest

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"sync"
	"testing"
)

var (
	mu     sync.Mutex
	builds = map[string]*build{}
)

type build struct {
	once sync.Once
	path string
	err  error
}

// Root returns the hostd module's root directory (the checkout these
// sources are in).
func Root() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Clean(filepath.Join(filepath.Dir(file), "..", ".."))
}

// Base is the directory under os.TempDir() that holds built plugins and
// the compilation cache.
func Base() string { return filepath.Join(os.TempDir(), "hostd-wasmtest") }

// CacheDir returns the wazero compilation cache directory shared by all
// tests (created if needed).
func CacheDir() string {
	d := filepath.Join(Base(), "wazero-cache")
	_ = os.MkdirAll(d, 0o755)
	return d
}

// Build builds the Go main package in pkgDir (absolute, or relative to the
// test's working directory) as a Wasm plugin and returns the .wasm path. It
// fails the test if the build fails, with the compiler's output.
func Build(t testing.TB, pkgDir string) string {
	t.Helper()
	p, err := BuildErr(pkgDir)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// BuildErr is Build without a testing.TB (for benchmarks' setup and
// TestMain).
func BuildErr(pkgDir string) (string, error) {
	abs, err := filepath.Abs(pkgDir)
	if err != nil {
		return "", err
	}
	key, err := hashInputs(abs)
	if err != nil {
		return "", fmt.Errorf("wasmtest: hash %s: %w", pkgDir, err)
	}
	mu.Lock()
	b := builds[key]
	if b == nil {
		b = &build{}
		builds[key] = b
	}
	mu.Unlock()
	b.once.Do(func() { b.path, b.err = doBuild(abs, key) })
	return b.path, b.err
}

func doBuild(dir, key string) (string, error) {
	out := filepath.Join(Base(), "plugins", filepath.Base(dir)+"-"+key[:16]+".wasm")
	if _, err := os.Stat(out); err == nil {
		return out, nil
	}
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		return "", err
	}
	tmp := fmt.Sprintf("%s.%d.tmp", out, os.Getpid())
	cmd := exec.Command("go", "build", "-buildmode=c-shared", "-o", tmp, ".")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOOS=wasip1", "GOARCH=wasm", "CGO_ENABLED=0")
	if msg, err := cmd.CombinedOutput(); err != nil {
		_ = os.Remove(tmp)
		return "", fmt.Errorf("wasmtest: build %s: %v\n%s", dir, err, msg)
	}
	if err := os.Rename(tmp, out); err != nil {
		return "", err
	}
	return out, nil
}

// hashInputs hashes the package's files, the SDK's sources and the Go
// version: a change to any of them makes a new build.
func hashInputs(dir string) (string, error) {
	h := sha256.New()
	fmt.Fprintln(h, runtime.Version(), dir)
	for _, d := range []string{dir, filepath.Join(Root(), "sdk")} {
		var files []string
		err := filepath.WalkDir(d, func(p string, e fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if e.IsDir() {
				if p != d && (e.Name() == "testdata" || strings.HasPrefix(e.Name(), ".")) {
					return filepath.SkipDir
				}
				return nil
			}
			if n := e.Name(); strings.HasSuffix(n, ".go") || n == "go.mod" || n == "go.sum" {
				files = append(files, p)
			}
			return nil
		})
		if err != nil {
			return "", err
		}
		sort.Strings(files)
		for _, f := range files {
			fh, err := os.Open(f)
			if err != nil {
				return "", err
			}
			fmt.Fprintln(h, f)
			_, err = io.Copy(h, fh)
			fh.Close()
			if err != nil {
				return "", err
			}
		}
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

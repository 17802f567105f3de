package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/hostd-dev/hostd/internal/wasmtest"
)

var hostdBin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "hostd-e2e")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	hostdBin = filepath.Join(dir, "hostd")
	out, err := exec.Command("go", "build", "-tags", "failpoints", "-o", hostdBin, "../cmd/hostd").CombinedOutput()
	if err != nil {
		fmt.Fprintf(os.Stderr, "build hostd: %v\n%s", err, out)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// collectionsWasm builds plugins/collections for wasip1 (cached).
func collectionsWasm(t *testing.T) string {
	return wasmtest.Build(t, "../plugins/collections")
}

func long() bool { return os.Getenv("HOSTD_LONG") == "1" }

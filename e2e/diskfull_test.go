package e2e

import (
	"context"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hostd-dev/hostd/client"
)

// TestNoRoomForTheCatalog: hostd started where the catalog's files cannot
// grow (RLIMIT_FSIZE below Badger's preallocated value-log file, the way a
// nearly full disk refuses it) exits at once with a clear error naming
// the file, without a panic or a hang; once there is room again, the next
// start on the same data directory works (Badger's empty value-log file
// left by the failed start is removed by the catalog).
func TestNoRoomForTheCatalog(t *testing.T) {
	dir := t.TempDir()
	addr := freePort(t)
	cfg := writeConfig(t, dir, addr, []string{"orders/0"})
	// ulimit -f counts 1 KiB blocks: 128 MiB, room for the 64 MiB memtable
	// file but not for the value log.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "sh", "-c", `ulimit -f 131072 && exec "$0" serve -c "$1"`, hostdBin, cfg)
	out, err := cmd.CombinedOutput()
	if err == nil {
		t.Fatalf("hostd started without room for its catalog:\n%s", out)
	}
	if ctx.Err() != nil {
		t.Fatalf("hostd hung instead of failing:\n%s", out)
	}
	if code := cmd.ProcessState.ExitCode(); code <= 0 {
		t.Fatalf("exit %d (want a plain error exit, not a signal):\n%s", code, out)
	}
	s := string(out)
	if !strings.Contains(s, "open catalog") || !strings.Contains(s, "file too large") || strings.Contains(s, "panic") {
		t.Fatalf("want a clear catalog error, got:\n%s", s)
	}

	c, err := client.New("http://" + addr)
	if err != nil {
		t.Fatal(err)
	}
	d := startReady(t, c, cfg, addr, filepath.Join(dir, "second.log")) // with room: works
	d.stop(t)
}

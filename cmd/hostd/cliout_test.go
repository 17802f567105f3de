package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hostd-dev/hostd/client"
)

// What the CLI tells its user: `broadcast send` exits 4 (not 0) when the
// broadcast ends FAILED; `channel read` says how to continue when more
// messages are retained than it printed; tables show times to the
// millisecond.
func TestCLIExitCodesAndOutput(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "hostd.yaml")
	if err := os.WriteFile(cfg, []byte("broadcast:\n  vchannels: [orders/0]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	d := startDaemon(t, dir, "-c", cfg, "--listen", "127.0.0.1:0", "--data-dir", "data")
	addr := []string{"--addr", d.addr}

	// A send that waits for done, while an operator abandons the task:
	// the broadcast ends FAILED and send says so with exit code 4.
	type result struct {
		out, errOut string
		code        int
	}
	done := make(chan result, 1)
	go func() {
		o, e, c := runCLI(t, dir, append([]string{"broadcast", "send", "noop", "orders/0", "--ack-sync-up", "--idempotency-key", "to-fail"}, addr...)...)
		done <- result{o, e, c}
	}()
	var id string
	for deadline := time.Now().Add(2 * time.Minute); id == "" && time.Now().Before(deadline); {
		var l client.List[client.BroadcastTask]
		cliJSON(t, dir, &l, append([]string{"broadcast", "ls", "--state", "PENDING"}, addr...)...)
		if len(l.Items) > 0 {
			id = strconv.FormatUint(l.Items[0].ID, 10)
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if id == "" {
		t.Fatal("the broadcast never became PENDING")
	}
	if _, errOut, code := runCLI(t, dir, append([]string{"broadcast", "abandon", id, "--reason", "test"}, addr...)...); code != 0 {
		t.Fatalf("abandon: %d %s", code, errOut)
	}
	var r result
	select {
	case r = <-done:
	case <-time.After(2 * time.Minute):
		t.Fatal("send did not return after abandon")
	}
	if r.code != exitFailed || !strings.Contains(r.out, "FAILED") || !strings.Contains(r.errOut, "ended FAILED") {
		t.Fatalf("send of a broadcast that ends FAILED: exit %d\n%s\n%s", r.code, r.out, r.errOut)
	}
	// A send that succeeds still exits 0.
	if out, errOut, code := runCLI(t, dir, append([]string{"broadcast", "send", "noop", "orders/0"}, addr...)...); code != 0 || !strings.Contains(out, "TOMBSTONE") {
		t.Fatalf("successful send: exit %d\n%s%s", code, out, errOut)
	}

	// Tables show milliseconds.
	out, _, code := runCLI(t, dir, append([]string{"broadcast", "ls", "--all"}, addr...)...)
	if code != 0 || !regexp.MustCompile(`\d\d:\d\d:\d\d\.\d{3}`).MatchString(out) {
		t.Fatalf("broadcast ls times are not sub-second:\n%s", out)
	}

	// channel read: a page that does not reach the end says how to go on.
	for i := 0; i < 3; i++ {
		if _, errOut, code := runCLI(t, dir, append([]string{"channel", "append", "orders/0", "m" + strconv.Itoa(i)}, addr...)...); code != 0 {
			t.Fatalf("append: %s", errOut)
		}
	}
	var b struct {
		Max uint64 `json:"max"`
	}
	cliJSON(t, dir, &b, append([]string{"channel", "bounds", "orders/0"}, addr...)...)
	from := strconv.FormatUint(b.Max-3, 10)
	_, errOut, code := runCLI(t, dir, append([]string{"channel", "read", "orders/0", "--from", from, "--limit", "2"}, addr...)...)
	next := strconv.FormatUint(b.Max-1, 10)
	if code != 0 || !strings.Contains(errOut, "continue with --from "+next) {
		t.Fatalf("read of a partial page: exit %d, stderr %q (want --from %s)", code, errOut, next)
	}
	_, errOut, _ = runCLI(t, dir, append([]string{"channel", "read", "orders/0", "--from", next, "--limit", "2"}, addr...)...)
	if strings.Contains(errOut, "continue with") {
		t.Fatalf("read to the end says there is more: %q", errOut)
	}
}

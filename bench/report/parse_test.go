package report

import (
	"os"
	"runtime"
	"strings"
	"testing"
	"time"
)

func readOut(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile("testdata/" + name)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// find returns the row with this figure and a baseline starting with base.
func find(t *testing.T, rows []Row, figure, base string) Row {
	t.Helper()
	for _, r := range rows {
		if r.Figure == figure && strings.HasPrefix(r.Baseline, base) {
			return r
		}
	}
	t.Fatalf("no row %q vs %q in %+v", figure, base, rows)
	return Row{}
}

func near(a, b float64) bool { return a > b*0.999 && a < b*1.001 }

// The testdata files are what the packages printed in a real `make bench`.
func TestParseBroadcast(t *testing.T) {
	rows, err := ParseBroadcast(readOut(t, "broadcast.out"))
	if err != nil {
		t.Fatal(err)
	}
	r := find(t, rows, "FastAck to 4 vchannels, in-process, 256 clients", "raw fsync")
	if r.Value != 968 || r.BaseVal != 923 || r.Met == nil || *r.Met || !strings.Contains(r.Note, "needs 4615/s") {
		t.Fatalf("in-process@256: %+v", r)
	}
	if n := strings.Count(r.Note, "commit rounds"); n != 1 {
		t.Fatalf("the reason names the commit rounds %d times: %s", n, r.Note)
	}
	var b strings.Builder
	Render(&b, rows)
	if !strings.Contains(b.String(), "| raw fsync (4 KiB write + fdatasync), 1 writer: 923 fsyncs/s |") {
		t.Fatalf("the fsync baseline is not in fsyncs/s:\n%s", b.String())
	}
	r = find(t, rows, "FastAck over HTTP, 64 clients", "minimal net/http")
	if r.Value != 751 || r.BaseVal != 4598 || *r.Met || !strings.Contains(r.Note, "minimal handler: 89µs CPU per request") {
		t.Fatalf("http@64: %+v", r)
	}
	r = find(t, rows, "FastAck in-process, 1 client: p50 latency", "raw fsync p50")
	if r.Value != 10663 || r.BaseVal != 415 || *r.Met || !strings.Contains(r.Note, "4.53 commit rounds (fsyncs) per broadcast") {
		t.Fatalf("p50@1: %+v", r)
	}
	r = find(t, rows, "HTTP POST /v1/broadcasts, 256 clients", "raw fsync")
	if r.Value != 453 || r.Met != nil {
		t.Fatalf("context row: %+v", r)
	}
	for _, r := range rows {
		if !r.Compared() || r.Ratio == 0 {
			t.Errorf("row without a baseline or ratio: %+v", r)
		}
	}
	if _, err := ParseBroadcast("PASS\n"); err == nil {
		t.Fatal("no table: want an error")
	}
}

func TestParsePlugins(t *testing.T) {
	rows, err := ParsePlugins(readOut(t, "plugins.out"))
	if err != nil {
		t.Fatal(err)
	}
	r := find(t, rows, "ack callback, 256B payload: hostd CPU per call", "Extism")
	if r.Value != 95621 || r.BaseVal != 59315 || r.Met == nil || *r.Met || !strings.Contains(r.Target, "5×") {
		t.Fatalf("256B vs extism: %+v", r)
	}
	// The reason is the breakdown measured beside it: KV write = hostd − no-kv.
	if !strings.Contains(r.Note, "result KV write (hostd − hostd-no-kv) 50µs") {
		t.Fatalf("reason: %s", r.Note)
	}
	r = find(t, rows, "ack callback, 64KiB payload: hostd CPU per call", "native")
	if r.Value != 7053267 || r.BaseVal != 58142 || !near(r.Ratio, 7053267.0/58142) {
		t.Fatalf("64KiB vs native: %+v", r)
	}
	if r := find(t, rows, "ack callback, 64KiB payload: hostd CPU per call", "Extism"); r.Target != "" || r.Met != nil {
		t.Fatalf("only the 256-byte row has a target: %+v", r)
	}
	if _, err := ParsePlugins("| a | b |\n"); err == nil {
		t.Fatal("no table: want an error")
	}
}

func TestParseLocks(t *testing.T) {
	rows, err := ParseLocks(readOut(t, "locks.out"))
	if err != nil {
		t.Fatal(err)
	}
	r := find(t, rows, "lease acquire+release over HTTP, 64 clients, distinct keys", "minimal")
	if r.Value != 1129 || r.BaseVal != 1601 || !*r.Met {
		t.Fatalf("hostd@64: %+v", r)
	}
	r = find(t, rows, "lease acquire+release over HTTP, 64 clients", "Redis appendfsync always")
	if r.Value != 1129 || r.BaseVal != 4553 || r.Missing != "" {
		t.Fatalf("vs redis: %+v", r)
	}
	r = find(t, rows, "lease acquire+release over HTTP, 1 client", "raw write+fdatasync")
	if r.Value != 214 || r.BaseVal != 579 {
		t.Fatalf("hostd@1: %+v", r)
	}

	// The table with a CPU column and the committer's rounds (a later
	// format of bench/locks): same rows, and the note carries both.
	rows, err = ParseLocks(readOut(t, "locks-cpu.out"))
	if err != nil {
		t.Fatal(err)
	}
	r = find(t, rows, "lease acquire+release over HTTP, 64 clients, distinct keys", "minimal")
	if r.Value != 1129 || !strings.Contains(r.Note, "7.3 writers per catalog commit round") || !strings.Contains(r.Note, "process CPU 1.62ms per pair (minimal handler 610µs)") || !strings.Contains(r.Note, "median per-round ratio 0.71 (adjacent slices: [0.71 0.65 0.80])") {
		t.Fatalf("hostd@64 with CPU: %+v", r)
	}
	if r := find(t, rows, "lease acquire+release over HTTP, 1 client", "Redis without"); r.BaseVal != 9872 {
		t.Fatalf("redis@1 with CPU column: %+v", r)
	}

	rows, err = ParseLocks(readOut(t, "locks-noredis.out"))
	if err != nil {
		t.Fatal(err)
	}
	r = find(t, rows, "lease acquire+release over HTTP, 64 clients", "Redis without persistence")
	if !strings.Contains(r.Missing, "redis-server is not installed") {
		t.Fatalf("missing redis is not said: %+v", r)
	}
	var b strings.Builder
	Render(&b, rows)
	if !strings.Contains(b.String(), "| not measured | redis-server is not installed") {
		t.Fatalf("render of a missing row:\n%s", b.String())
	}
}

func TestCPUBound(t *testing.T) {
	n := float64(runtime.NumCPU())
	// CPU per op that caps the machine exactly at the rate reached.
	at := time.Duration(n / 1000 * float64(time.Second))
	if got := cpuBound(1000, 2000, at, "pair"); !strings.HasPrefix(got, "CPU-bound") || !strings.Contains(got, "caps") {
		t.Fatalf("cpuBound at the ceiling = %q", got)
	}
	// Ten times less CPU: the rate is not what the CPU allows.
	if got := cpuBound(1000, 2000, at/10, "pair"); !strings.HasPrefix(got, "not CPU-bound") || !strings.Contains(got, "10000/s") {
		t.Fatalf("cpuBound below the ceiling = %q", got)
	}
	if cpuBound(1000, 2000, 0, "pair") != "" {
		t.Fatal("no CPU figure: no claim")
	}
}

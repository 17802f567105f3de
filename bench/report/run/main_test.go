package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestSpecFor(t *testing.T) {
	const mod = "github.com/hostd-dev/hostd/bench/"
	if s := specFor(mod+"catalog", false); s.run != "Report|Table" || s.bench != "" || s.parse != nil {
		t.Errorf("short catalog: %+v", s)
	}
	if s := specFor(mod+"catalog", true); s.bench != "." || s.benchtime != "1s" {
		t.Errorf("full catalog: %+v", s)
	}
	if s := specFor(mod+"locks", false); s.run != "Report|Table" || s.bench != "LockPairs" || s.benchtime != "1x" || s.parse == nil {
		t.Errorf("locks: %+v", s)
	}
	for _, p := range []string{"broadcast", "plugins"} {
		if s := specFor(mod+p, false); s.parse == nil {
			t.Errorf("%s has no parser", p)
		}
	}
}

// TestRun runs the real runner on the baseline package (its report test
// takes a few seconds) and on a package whose report test fails: the
// report has the baseline's rows, the failed package is a "not measured"
// row, and the run exits 1.
func TestRun(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "latest.md")
	var stdout, stderr bytes.Buffer
	t.Setenv("HOSTD_BENCH_SECONDS", "0.1")
	code := run([]string{"-pkgs", "github.com/hostd-dev/hostd/bench/baseline ./testdata/failing", "-out", out, "-timeout", "5m"}, &stdout, &stderr)
	if code != 1 {
		t.Errorf("exit %d, want 1 (a package failed)\n%s", code, stderr.String())
	}
	md, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(md, stdout.Bytes()) {
		t.Error("stdout and the report file differ")
	}
	for _, want := range []string{
		"| machine | raw Badger single-key sync txn, 1 writer |",
		"| failing | every figure of failing | — |",
		"| not measured | go test failed",
		"**Targets: 0 met, 0 MISSED; 1 figures not measured.**",
		"- not measured: failing — every figure of failing",
		"## Failures",
	} {
		if !strings.Contains(string(md), want) {
			t.Errorf("report lacks %q:\n%s", want, md)
		}
	}
	if log, err := os.ReadFile(filepath.Join(dir, "latest.log")); err != nil || !strings.Contains(string(log), "the measurement failed") {
		t.Errorf("latest.log lacks the failing output (%v)", err)
	}
}

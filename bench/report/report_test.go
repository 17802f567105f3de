package report

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestEmitReadRender(t *testing.T) {
	path := filepath.Join(t.TempDir(), "rows.jsonl")
	t.Setenv(EnvRows, path)
	err := Emit(t.Logf,
		Row{Bench: "catalog", Figure: "Commit, 256 writers", Value: 5000, Unit: "commits/s", Baseline: "raw fsync", BaseVal: 500, Target: "≥ 5× raw fsync", MinRatio: 5},
		Row{Bench: "catalog", Figure: "Commit, 1 writer", Value: 100, Unit: "commits/s", Baseline: "raw badger", BaseVal: 400, Target: "≥ 0.5×", MinRatio: 0.5, Note: "lone writer pays a goroutine hop"},
	)
	if err != nil {
		t.Fatal(err)
	}
	f, _ := os.ReadFile(path)
	rows, err := ReadRows(bytes.NewReader(f))
	if err != nil || len(rows) != 2 {
		t.Fatalf("rows %v %v", rows, err)
	}
	if rows[0].Ratio != 10 || !*rows[0].Met || *rows[1].Met {
		t.Fatalf("finish: %+v %+v", rows[0], rows[1])
	}
	rows = append(rows, ParseBench("locks", "BenchmarkLockPairs/c=64-2   \t  100\t  12345 ns/op\t  812.5 pairs/s\t 64 B/op\nPASS\n")...)
	rows = append(rows, Row{Bench: "catalog", Figure: "Commit, 16 writers", Value: 1, Unit: "commits/s", Baseline: "raw fsync", BaseVal: 2, Target: "≥ 1×", MinRatio: 1}.Finish(),
		Row{Bench: "locks", Figure: "vs Redis", Baseline: "Redis", Missing: "redis-server is not installed"})
	var b strings.Builder
	Render(&b, rows)
	out := b.String()
	for _, want := range []string{"| catalog | Commit, 256 writers | 5000 commits/s | raw fsync: 500 commits/s | 10× | ≥ 5× raw fsync | met |  |",
		"| **MISSED** | lone writer pays a goroutine hop |",
		"| 0.50× | ≥ 1× | **MISSED** | (no reason measured) |", // a miss without a reason says so
		"| locks | vs Redis | — | Redis |  | — | not measured | redis-server is not installed |"} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "BenchmarkLockPairs") {
		t.Errorf("a figure without a baseline is in the main table:\n%s", out)
	}
	b.Reset()
	if n := RenderRaw(&b, rows); n != 2 {
		t.Errorf("RenderRaw wrote %d rows, want 2 (ns/op and pairs/s):\n%s", n, b.String())
	}
	for _, want := range []string{"| locks | BenchmarkLockPairs/c=64 | 12345 ns/op |", "| 813 pairs/s |"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("raw table lacks %q:\n%s", want, b.String())
		}
	}
	if strings.Contains(b.String(), "B/op") {
		t.Error("B/op should be left out")
	}
	if met, missed, missing := Summary(rows); met != 1 || missed != 2 || missing != 1 {
		t.Errorf("Summary = %d met, %d missed, %d missing", met, missed, missing)
	}
	if _, err := ReadRows(strings.NewReader("{bad json\n")); err == nil || !strings.Contains(err.Error(), "line 1") {
		t.Fatalf("bad line: %v", err)
	}
}

func TestNarrative(t *testing.T) {
	out := "=== RUN   TestReport\n    report_test.go:59: raw fsync c=1: 785 ops/s\n    report.go:69: catalog: Commit = 5 commits/s\n    report_test.go:60: | a | b |\n--- PASS: TestReport (7.36s)\ngoos: linux\nBenchmarkX-2   \t  10\t  5 ns/op\n  run   pairs/s\nPASS\nok  \tpkg\t1s\n"
	got := Narrative(out)
	want := "raw fsync c=1: 785 ops/s\n| a | b |\n  run   pairs/s"
	if got != want {
		t.Fatalf("Narrative = %q, want %q", got, want)
	}
}

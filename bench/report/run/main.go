// Command run runs every benchmark package of the bench module and writes
// one Markdown report (stdout and bench/results/latest.md; the raw output
// goes to bench/results/latest.log). Run it from the bench directory:
//
//	go run ./report/run          # short: about 0.5 s per figure
//	go run ./report/run -full    # long runs (HOSTD_LONG=1, 5 s per figure)
//
// Packages take part by emitting report.Row values (see package report)
// from a test whose name contains "Report" or "Table", and/or by having Go
// benchmarks (their result lines become rows without a baseline).
package main

import (
	"bytes"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"github.com/hostd-dev/hostd/bench/report"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	fs.SetOutput(stderr)
	full := fs.Bool("full", false, "long runs (HOSTD_LONG=1, 5 s per figure, 1 s benchtime)")
	out := fs.String("out", "results/latest.md", "Markdown report file")
	pkgsFlag := fs.String("pkgs", "./...", "packages to run (go list pattern)")
	timeout := fs.Duration("timeout", 20*time.Minute, "timeout per package")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	list, err := exec.Command("go", "list", *pkgsFlag).Output()
	if err != nil {
		fmt.Fprintf(stderr, "go list: %v\n", err)
		return 1
	}
	var pkgs []string
	for _, p := range strings.Fields(string(list)) {
		if strings.Contains(p, "/bench/report") {
			continue
		}
		pkgs = append(pkgs, p)
	}
	if err := os.MkdirAll(filepath.Dir(*out), 0o755); err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	rowsFile, err := os.CreateTemp("", "hostd-bench-rows-*.jsonl")
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	rowsFile.Close()
	defer os.Remove(rowsFile.Name())

	mode, seconds, benchtime := "short", "0.5", "200ms"
	env := append(os.Environ(), "HOSTD_BENCH=1", report.EnvRows+"="+rowsFile.Name())
	if *full {
		mode, seconds, benchtime = "full", "5", "1s"
		env = append(env, "HOSTD_LONG=1")
	} else {
		env = append(env, "HOSTD_BENCH_ROUNDS=1", "HOSTD_BENCH_SLICE=500ms")
	}
	env = append(env, "HOSTD_BENCH_SECONDS="+seconds)

	var logBuf bytes.Buffer
	var benchRows []report.Row
	var failures []string
	var narratives [][2]string
	start := time.Now()
	for _, p := range pkgs {
		fmt.Fprintf(stderr, "== %s\n", p)
		cmd := exec.Command("go", "test", "-v", "-count=1", "-run", "Report|Table", "-bench", ".", "-benchtime", benchtime,
			"-timeout", timeout.String(), p)
		cmd.Env = env
		var o bytes.Buffer
		cmd.Stdout = io.MultiWriter(&o, stderr)
		cmd.Stderr = cmd.Stdout
		err := cmd.Run()
		fmt.Fprintf(&logBuf, "== go test %s\n%s\n", p, o.String())
		benchRows = append(benchRows, report.ParseBench(path.Base(p), o.String())...)
		if txt := report.Narrative(o.String()); txt != "" {
			narratives = append(narratives, [2]string{p, txt})
		}
		if err != nil {
			failures = append(failures, fmt.Sprintf("%s: %v (see results/latest.log)", p, err))
		}
	}
	f, err := os.Open(rowsFile.Name())
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	rows, err := report.ReadRows(f)
	f.Close()
	if err != nil {
		failures = append(failures, err.Error())
	}
	rows = append(rows, benchRows...)

	var md bytes.Buffer
	fmt.Fprintf(&md, "# hostd benchmark report\n\n")
	fmt.Fprintf(&md, "%s run of `make bench%s` at %s, %s, %s/%s, %d CPUs, took %s.\n",
		mode, map[bool]string{true: "-full", false: ""}[*full], time.Now().UTC().Format(time.RFC3339),
		runtime.Version(), runtime.GOOS, runtime.GOARCH, runtime.NumCPU(), time.Since(start).Round(time.Second))
	fmt.Fprintf(&md, "Every baseline was measured in the same run on the same machine; ratio = figure / baseline.\n\n")
	report.Render(&md, rows)
	if len(narratives) > 0 {
		fmt.Fprintf(&md, "\n## What each package printed (its own tables, baselines and notes, same run)\n")
		for _, n := range narratives {
			fmt.Fprintf(&md, "\n### %s\n\n```\n%s\n```\n", n[0], n[1])
		}
	}
	if len(failures) > 0 {
		fmt.Fprintf(&md, "\n## Failures\n\n")
		for _, f := range failures {
			fmt.Fprintf(&md, "- %s\n", f)
		}
	}
	stdout.Write(md.Bytes())
	if err := os.WriteFile(*out, md.Bytes(), 0o644); err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	logPath := strings.TrimSuffix(*out, filepath.Ext(*out)) + ".log"
	if err := os.WriteFile(logPath, logBuf.Bytes(), 0o644); err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	if len(failures) > 0 {
		return 1
	}
	return 0
}

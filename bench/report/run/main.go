// Command run runs every benchmark package of the bench module and writes
// one Markdown report (stdout and bench/results/latest.md; the raw output
// goes to bench/results/latest.log). Run it from the bench directory:
//
//	go run ./report/run          # short: a few minutes (`make bench`)
//	go run ./report/run -full    # long runs (`make bench-full`: HOSTD_LONG=1, 5 s per figure, every Go benchmark)
//
// The report's one table has a row per figure: its value beside a baseline
// measured in the same run, the ratio, the target from the issue, met or
// MISSED, and for a miss the measured reason. Rows come from
//
//   - report.Emit in a package's test whose name contains "Report" or
//     "Table" (catalog, mapping, tracing, baseline);
//   - the parsers of package report for the packages that print their own
//     tables (broadcast, plugins, locks);
//   - a "not measured" row for every package that failed or that a parser
//     could not read, so a gap is never silent.
//
// Plain `go test -bench` result lines have no baseline: they go to a
// collapsed section at the end, with each package's printed output.
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

// spec is how one package is run.
type spec struct {
	run, bench, benchtime string
	parse                 func(string) ([]report.Row, error)
}

// specFor returns how to run package pkg. By default: the tests whose name
// contains Report or Table, and (full only) every Go benchmark. The
// packages that print their own tables are parsed; locks measures its
// pairs in one benchmark run once.
func specFor(pkg string, full bool) spec {
	s := spec{run: "Report|Table", benchtime: "200ms"}
	if full {
		s.bench, s.benchtime = ".", "1s"
	}
	switch path.Base(pkg) {
	case "broadcast":
		s.parse = report.ParseBroadcast
	case "plugins":
		s.run, s.parse = "TestPluginCallTable", report.ParsePlugins
	case "locks":
		s.bench, s.benchtime, s.parse = "LockPairs", "1x", report.ParseLocks
	}
	return s
}

func run(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	fs.SetOutput(stderr)
	full := fs.Bool("full", false, "long runs (HOSTD_LONG=1, 5 s per figure, every Go benchmark at 1 s)")
	out := fs.String("out", "results/latest.md", "Markdown report file")
	pkgsFlag := fs.String("pkgs", "./...", "packages to run (go list patterns, space-separated)")
	timeout := fs.Duration("timeout", 20*time.Minute, "timeout per package")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	list, err := exec.Command("go", append([]string{"list"}, strings.Fields(*pkgsFlag)...)...).Output()
	if err != nil {
		fmt.Fprintf(stderr, "go list: %v\n", err)
		return 1
	}
	var pkgs []string
	for _, p := range strings.Fields(string(list)) {
		if strings.HasSuffix(p, "/bench/report") || strings.HasSuffix(p, "/bench/report/run") {
			continue // the report itself measures nothing
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

	mode, seconds := "short", "0.5"
	env := append(os.Environ(), "HOSTD_BENCH=1", report.EnvRows+"="+rowsFile.Name())
	if *full {
		mode, seconds = "full", "5"
		env = append(env, "HOSTD_LONG=1")
	} else {
		env = append(env, "HOSTD_BENCH_ROUNDS=1", "HOSTD_BENCH_SLICE=500ms")
	}
	env = append(env, "HOSTD_BENCH_SECONDS="+seconds)

	var logBuf bytes.Buffer
	var rows, rawRows []report.Row
	var failures []string
	var narratives [][2]string
	start := time.Now()
	for _, p := range pkgs {
		s := specFor(p, *full)
		fmt.Fprintf(stderr, "== %s\n", p)
		args := []string{"test", "-v", "-count=1", "-run", s.run, "-benchtime", s.benchtime, "-timeout", timeout.String()}
		if s.bench != "" {
			args = append(args, "-bench", s.bench)
		}
		cmd := exec.Command("go", append(args, p)...)
		// GOFLAGS carries -benchtime to the `go test` that a package starts
		// itself (bench/plugins runs bench/extism in a subprocess).
		cmd.Env = append(env, "GOFLAGS=-benchtime="+s.benchtime)
		var o bytes.Buffer
		cmd.Stdout = io.MultiWriter(&o, stderr)
		cmd.Stderr = cmd.Stdout
		t0 := time.Now()
		err := cmd.Run()
		fmt.Fprintf(&logBuf, "== go %s %s (%s)\n%s\n", strings.Join(args, " "), p, time.Since(t0).Round(time.Second), o.String())
		// The rows this package emitted, then those parsed from its output:
		// the table keeps the packages' order.
		emitted, rerr := takeRows(rowsFile.Name())
		if rerr != nil {
			failures = append(failures, fmt.Sprintf("%s: %v", p, rerr))
		}
		rows = append(rows, emitted...)
		rawRows = append(rawRows, report.ParseBench(path.Base(p), o.String())...)
		if txt := report.Narrative(o.String()); txt != "" {
			narratives = append(narratives, [2]string{p, txt})
		}
		if err != nil {
			failures = append(failures, fmt.Sprintf("%s: %v (see results/latest.log)", p, err))
			rows = append(rows, report.Row{Bench: path.Base(p), Figure: "every figure of " + path.Base(p),
				Missing: fmt.Sprintf("go test failed (%v); its output is in results/latest.log", err)})
			continue
		}
		if s.parse != nil {
			parsed, perr := s.parse(o.String())
			if perr != nil {
				failures = append(failures, perr.Error())
				parsed = append(parsed, report.Row{Bench: path.Base(p), Figure: "figures of " + path.Base(p), Missing: perr.Error()})
			}
			rows = append(rows, parsed...)
		}
	}
	rows = append(rows, rawRows...)

	var md bytes.Buffer
	fmt.Fprintf(&md, "# hostd benchmark report\n\n")
	fmt.Fprintf(&md, "%s run of `make bench%s` at %s, %s, %s/%s, %d CPUs, 1-minute load average at the end %s, took %s.\n",
		mode, map[bool]string{true: "-full", false: ""}[*full], time.Now().UTC().Format(time.RFC3339),
		runtime.Version(), runtime.GOOS, runtime.GOARCH, runtime.NumCPU(), loadAvg(), time.Since(start).Round(time.Second))
	fmt.Fprintf(&md, "Every baseline was measured in the same run on the same machine; ratio = figure / baseline. "+
		"Targets are the issues' (2 catalog, 3 plugins, 4 broadcast, 5 locks, 6 mapping, 7 tracing); a missed target does not fail the run.\n\n")
	met, missed, missing := report.Summary(rows)
	fmt.Fprintf(&md, "**Targets: %d met, %d MISSED; %d figures not measured.**\n\n", met, missed, missing)
	for _, r := range rows {
		switch {
		case r.Missing != "":
			fmt.Fprintf(&md, "- not measured: %s — %s\n", r.Bench, r.Figure)
		case r.Met != nil && !*r.Met:
			fmt.Fprintf(&md, "- MISSED: %s — %s: %s %s (target %s)\n", r.Bench, r.Figure, r.RatioText(), r.Baseline, r.Target)
		}
	}
	if missed+missing > 0 {
		fmt.Fprintln(&md)
	}
	report.Render(&md, rows)
	var raw bytes.Buffer
	if n := report.RenderRaw(&raw, rows); n > 0 {
		fmt.Fprintf(&md, "\n<details><summary>%d plain <code>go test -bench</code> figures (no same-run baseline; context only)</summary>\n\n%s\n</details>\n", n, raw.String())
	}
	if len(narratives) > 0 {
		fmt.Fprintf(&md, "\n<details><summary>What each package printed (same run)</summary>\n")
		for _, n := range narratives {
			fmt.Fprintf(&md, "\n#### %s\n\n```\n%s\n```\n", n[0], n[1])
		}
		fmt.Fprintf(&md, "\n</details>\n")
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

// takeRows reads the rows emitted so far and empties the file.
func takeRows(name string) ([]report.Row, error) {
	b, err := os.ReadFile(name)
	if err != nil {
		return nil, err
	}
	rows, err := report.ReadRows(bytes.NewReader(b))
	if terr := os.Truncate(name, 0); err == nil {
		err = terr
	}
	return rows, err
}

func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if f := strings.Fields(string(b)); err == nil && len(f) > 0 {
		return f[0]
	}
	return "unknown"
}

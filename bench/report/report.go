// Package report is the one benchmark table of hostd. Benchmarks in bench/
// Emit rows (a figure beside its baseline from the same run, the ratio, the
// target and a note); `make bench` (short) and `make bench-full` run every
// benchmark package with HOSTD_BENCH_ROWS pointing at a rows file, also
// collect plain `go test -bench` result lines, and Render one Markdown
// table to stdout and bench/results/latest.md (see ./run).
package report

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
)

// EnvRows names the JSON-lines file rows are appended to.
const EnvRows = "HOSTD_BENCH_ROWS"

// Row is one figure of the report.
type Row struct {
	Bench    string  `json:"bench"`            // package or area, e.g. "catalog"
	Figure   string  `json:"figure"`           // what was measured, e.g. "Commit, 256 writers"
	Value    float64 `json:"value"`            // the measured figure
	Unit     string  `json:"unit"`             // e.g. "commits/s", "ns/op"
	Baseline string  `json:"baseline"`         // the baseline's name, measured in the same run
	BaseVal  float64 `json:"baseline_value"`   // the baseline's figure (same unit)
	Ratio    float64 `json:"ratio,omitempty"`  // Value/BaseVal unless set
	Target   string  `json:"target,omitempty"` // e.g. "≥ 5× raw fsync"
	// MinRatio, when > 0, is the target as a ratio: Met = Ratio >= MinRatio
	// (MaxRatio: Ratio <= MaxRatio, for costs).
	MinRatio float64 `json:"min_ratio,omitempty"`
	MaxRatio float64 `json:"max_ratio,omitempty"`
	Met      *bool   `json:"met,omitempty"`
	Note     string  `json:"note,omitempty"` // for a missed target: the measured reason
}

// Finish computes Ratio and Met from the other fields.
func (r Row) Finish() Row {
	if r.Ratio == 0 && r.BaseVal != 0 {
		r.Ratio = r.Value / r.BaseVal
	}
	if r.Met == nil && (r.MinRatio > 0 || r.MaxRatio > 0) && r.Ratio != 0 {
		met := (r.MinRatio == 0 || r.Ratio >= r.MinRatio) && (r.MaxRatio == 0 || r.Ratio <= r.MaxRatio)
		r.Met = &met
	}
	return r
}

var emitMu sync.Mutex

// Emit appends rows to the file named by HOSTD_BENCH_ROWS (a no-op when it
// is unset) and returns them finished. It also writes them, readable, to
// log (pass t.Logf-like func, or nil).
func Emit(logf func(string, ...any), rows ...Row) error {
	for i := range rows {
		rows[i] = rows[i].Finish()
		if logf != nil {
			logf("%s", rows[i].Line())
		}
	}
	path := os.Getenv(EnvRows)
	if path == "" {
		return nil
	}
	emitMu.Lock()
	defer emitMu.Unlock()
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer f.Close()
	enc := json.NewEncoder(f)
	for _, r := range rows {
		if err := enc.Encode(r); err != nil {
			return err
		}
	}
	return nil
}

// Line is a one-line text form of the row.
func (r Row) Line() string {
	s := fmt.Sprintf("%s: %s = %s %s", r.Bench, r.Figure, num(r.Value), r.Unit)
	if r.Baseline != "" {
		s += fmt.Sprintf("; %s = %s (ratio %s)", r.Baseline, num(r.BaseVal), ratio(r.Ratio))
	}
	if r.Target != "" {
		s += fmt.Sprintf("; target %s: %s", r.Target, status(r))
	}
	if r.Note != "" {
		s += "; " + r.Note
	}
	return s
}

// ReadRows reads a JSON-lines rows file; a malformed line is an error
// naming its line number.
func ReadRows(r io.Reader) ([]Row, error) {
	var rows []Row
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<16), 1<<20)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" {
			continue
		}
		var row Row
		if err := json.Unmarshal([]byte(line), &row); err != nil {
			return rows, fmt.Errorf("report: rows line %d: %w", n, err)
		}
		rows = append(rows, row.Finish())
	}
	return rows, sc.Err()
}

var benchLine = regexp.MustCompile(`^(Benchmark\S+?)(?:-\d+)?\s+(\d+)\s+(.+)$`)

// ParseBench turns `go test -bench` result lines of package pkg into rows
// without a baseline (value and unit of each reported metric).
func ParseBench(bench string, out string) []Row {
	var rows []Row
	for _, line := range strings.Split(out, "\n") {
		m := benchLine.FindStringSubmatch(strings.TrimSpace(line))
		if m == nil {
			continue
		}
		f := strings.Fields(m[3])
		for i := 0; i+1 < len(f); i += 2 {
			v, err := strconv.ParseFloat(f[i], 64)
			if err != nil {
				break
			}
			if f[i+1] == "B/op" || f[i+1] == "allocs/op" {
				continue
			}
			rows = append(rows, Row{Bench: bench, Figure: m[1], Value: v, Unit: f[i+1]})
		}
	}
	return rows
}

// Render writes rows as one Markdown table, grouped by bench in first-seen
// order.
func Render(w io.Writer, rows []Row) {
	order := map[string]int{}
	for _, r := range rows {
		if _, ok := order[r.Bench]; !ok {
			order[r.Bench] = len(order)
		}
	}
	sorted := append([]Row(nil), rows...)
	sort.SliceStable(sorted, func(i, j int) bool { return order[sorted[i].Bench] < order[sorted[j].Bench] })
	fmt.Fprintln(w, "| bench | figure | value | baseline (same run) | ratio | target | status / note |")
	fmt.Fprintln(w, "|---|---|---:|---|---:|---|---|")
	for _, r := range sorted {
		base := ""
		if r.Baseline != "" {
			base = fmt.Sprintf("%s: %s %s", r.Baseline, num(r.BaseVal), r.Unit)
		}
		st := status(r)
		if r.Note != "" {
			if st != "" {
				st += " — "
			}
			st += r.Note
		}
		fmt.Fprintf(w, "| %s | %s | %s %s | %s | %s | %s | %s |\n",
			cell(r.Bench), cell(r.Figure), num(r.Value), cell(r.Unit), cell(base), ratio(r.Ratio), cell(r.Target), cell(st))
	}
}

func status(r Row) string {
	switch {
	case r.Met == nil:
		return ""
	case *r.Met:
		return "met"
	default:
		return "**MISSED**"
	}
}

func cell(s string) string { return strings.ReplaceAll(strings.ReplaceAll(s, "|", "\\|"), "\n", " ") }

func ratio(x float64) string {
	if x == 0 || math.IsNaN(x) || math.IsInf(x, 0) {
		return ""
	}
	if x >= 10 {
		return fmt.Sprintf("%.0f×", x)
	}
	return fmt.Sprintf("%.2f×", x)
}

func num(x float64) string {
	switch ax := math.Abs(x); {
	case ax >= 100:
		return strconv.FormatFloat(math.Round(x), 'f', -1, 64)
	case ax >= 1:
		return strconv.FormatFloat(x, 'f', 1, 64)
	default:
		return strconv.FormatFloat(x, 'g', 3, 64)
	}
}

var (
	noise     = regexp.MustCompile(`^(=== (RUN|PAUSE|CONT|NAME)|--- (PASS|SKIP)|PASS$|ok\s|goos:|goarch:|pkg:|cpu:|Benchmark\S+\s+\d+\s)`)
	logPrefix = regexp.MustCompile(`^\s*\S+_test\.go:\d+: ?`)
)

// Narrative returns what a `go test -v` run printed besides test
// bookkeeping and benchmark result lines (tables and notes of benchmarks
// that print their own), with "file_test.go:NN:" prefixes removed.
func Narrative(out string) string {
	var keep []string
	for _, line := range strings.Split(out, "\n") {
		if strings.TrimSpace(line) == "" || noise.MatchString(strings.TrimSpace(line)) {
			continue
		}
		if strings.HasPrefix(strings.TrimSpace(line), "Benchmark") && !strings.Contains(line, " ") {
			continue // a benchmark name line before its result
		}
		keep = append(keep, strings.TrimRight(logPrefix.ReplaceAllString(line, ""), " \t"))
	}
	// Remove the indentation common to every kept line.
	indent := -1
	for _, l := range keep {
		n := len(l) - len(strings.TrimLeft(l, " \t"))
		if indent < 0 || n < indent {
			indent = n
		}
	}
	for i := range keep {
		keep[i] = keep[i][max(indent, 0):]
	}
	return strings.Join(keep, "\n")
}

// Package report is the one benchmark table of hostd. Each row is a figure
// beside its baseline measured in the same run, the ratio, the target from
// the issue, met or MISSED and, for a miss, the measured reason; a figure
// that could not be measured is a row that says why (Row.Missing).
//
// Rows come from two places: benchmark packages Emit them from a test (they
// are appended as JSON lines to the file named by HOSTD_BENCH_ROWS), and
// the parsers in parse.go turn the tables that bench/broadcast,
// bench/plugins and bench/locks print into rows. `make bench` (short) and
// `make bench-full` run every package through ./run, which Renders the rows
// into bench/results/latest.md; plain `go test -bench` lines (ParseBench)
// have no baseline and go to a collapsed section (RenderRaw).
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
	Bench    string  `json:"bench"`                   // package or area, e.g. "catalog"
	Figure   string  `json:"figure"`                  // what was measured, e.g. "Commit, 256 writers"
	Value    float64 `json:"value"`                   // the measured figure
	Unit     string  `json:"unit"`                    // e.g. "commits/s", "ns/op"
	Baseline string  `json:"baseline"`                // the baseline's name, measured in the same run
	BaseVal  float64 `json:"baseline_value"`          // the baseline's figure (in Unit unless BaseUnit is set)
	BaseUnit string  `json:"baseline_unit,omitempty"` // the baseline's unit when it differs (e.g. "fsyncs/s")
	Ratio    float64 `json:"ratio,omitempty"`         // Value/BaseVal unless set
	Target   string  `json:"target,omitempty"`        // e.g. "≥ 5× raw fsync"
	// MinRatio, when > 0, is the target as a ratio: Met = Ratio >= MinRatio
	// (MaxRatio: Ratio <= MaxRatio, for costs).
	MinRatio float64 `json:"min_ratio,omitempty"`
	MaxRatio float64 `json:"max_ratio,omitempty"`
	Met      *bool   `json:"met,omitempty"`
	Note     string  `json:"note,omitempty"` // for a missed target: the measured reason
	// Missing, when set, says why the figure could not be measured in this
	// run (e.g. "redis-server is not installed"); the row is still shown,
	// so a gap in the report is never silent.
	Missing string `json:"missing,omitempty"`
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
	if r.Missing != "" {
		s += "; not measured: " + r.Missing
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

// Compared reports whether r belongs in the main table: a figure beside a
// baseline from the same run, a figure with a target, or a figure that could
// not be measured (so that the gap shows).
func (r Row) Compared() bool { return r.Baseline != "" || r.Target != "" || r.Missing != "" }

// Summary counts the rows whose target was met or missed, and the figures
// that could not be measured.
func Summary(rows []Row) (met, missed, missing int) {
	for _, r := range rows {
		switch {
		case r.Missing != "":
			missing++
		case r.Met == nil:
		case *r.Met:
			met++
		default:
			missed++
		}
	}
	return met, missed, missing
}

// Render writes the compared rows (see Compared) as one Markdown table,
// grouped by bench in first-seen order: each figure beside its baseline
// from the same run, the ratio, the target, its status and, for a missed
// target, the measured reason. Other rows are left to RenderRaw.
func Render(w io.Writer, rows []Row) {
	fmt.Fprintln(w, "| bench | figure | value | baseline (same run) | ratio | target | status | note (for a miss: the measured reason) |")
	fmt.Fprintln(w, "|---|---|---:|---|---:|---|---|---|")
	for _, r := range grouped(rows) {
		if !r.Compared() {
			continue
		}
		val, base := num(r.Value)+" "+r.Unit, ""
		if r.Baseline != "" {
			base = fmt.Sprintf("%s: %s %s", r.Baseline, num(r.BaseVal), r.baseUnit())
		}
		note := r.Note
		if r.Missing != "" {
			val, base, note = "—", r.Baseline, r.Missing
		} else if r.Met != nil && !*r.Met && note == "" {
			note = "(no reason measured)"
		}
		target := r.Target
		if target == "" {
			target = "—"
		}
		fmt.Fprintf(w, "| %s | %s | %s | %s | %s | %s | %s | %s |\n",
			cell(r.Bench), cell(r.Figure), cell(val), cell(base), ratio(r.Ratio), cell(target), status(r), cell(note))
	}
}

// RenderRaw writes the rows that have no baseline (plain `go test -bench`
// result lines) as a Markdown table; it writes nothing when there are none.
func RenderRaw(w io.Writer, rows []Row) int {
	n := 0
	for _, r := range grouped(rows) {
		if r.Compared() {
			continue
		}
		if n == 0 {
			fmt.Fprintln(w, "| bench | figure | value | note |")
			fmt.Fprintln(w, "|---|---|---:|---|")
		}
		n++
		fmt.Fprintf(w, "| %s | %s | %s %s | %s |\n", cell(r.Bench), cell(r.Figure), num(r.Value), cell(r.Unit), cell(r.Note))
	}
	return n
}

// grouped returns rows sorted by bench in first-seen order (stable).
func grouped(rows []Row) []Row {
	order := map[string]int{}
	for _, r := range rows {
		if _, ok := order[r.Bench]; !ok {
			order[r.Bench] = len(order)
		}
	}
	sorted := append([]Row(nil), rows...)
	sort.SliceStable(sorted, func(i, j int) bool { return order[sorted[i].Bench] < order[sorted[j].Bench] })
	return sorted
}

func status(r Row) string {
	switch {
	case r.Missing != "":
		return "not measured"
	case r.Met == nil:
		return "—"
	case *r.Met:
		return "met"
	default:
		return "**MISSED**"
	}
}

func (r Row) baseUnit() string {
	if r.BaseUnit != "" {
		return r.BaseUnit
	}
	return r.Unit
}

// RatioText is the ratio as the table shows it ("0.62×", "38×").
func (r Row) RatioText() string { return ratio(r.Ratio) }

func cell(s string) string { return strings.ReplaceAll(strings.ReplaceAll(s, "|", "\\|"), "\n", " ") }

func ratio(x float64) string {
	if x == 0 || math.IsNaN(x) || math.IsInf(x, 0) {
		return ""
	}
	switch ax := math.Abs(x); {
	case ax >= 10:
		return fmt.Sprintf("%.0f×", x)
	case ax >= 0.1:
		return fmt.Sprintf("%.2f×", x)
	default:
		return strconv.FormatFloat(x, 'g', 2, 64) + "×"
	}
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
	noise     = regexp.MustCompile(`^(=== (RUN|PAUSE|CONT|NAME)|--- (PASS|SKIP)|PASS$|ok\s|goos:|goarch:|pkg:|cpu:|Benchmark\S+\s+\d+\s|report\.go:\d+: )`)
	logPrefix = regexp.MustCompile(`^\s*\S+_test\.go:\d+: ?`)
)

// Narrative returns what a `go test -v` run printed besides test
// bookkeeping, benchmark result lines and the rows Emit logged (they are in
// the table): the tables and notes of benchmarks that print their own, with
// "file_test.go:NN:" prefixes removed.
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

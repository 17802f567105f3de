package report

import (
	"fmt"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"time"
)

// Parsers for the packages that print their own tables (bench/broadcast,
// bench/plugins, bench/locks): they turn what a package printed into
// report rows — each figure beside its same-run baseline, the target of its
// issue, and for a miss the reason computed from the other figures of the
// same table. Each returns an error when the table it expects is not
// there, so a changed format shows up in the report instead of silently
// dropping rows.

// lines returns out's lines without `go test -v` log prefixes
// ("    file_test.go:NN: ") and surrounding blanks.
func lines(out string) []string {
	var ls []string
	for _, l := range strings.Split(out, "\n") {
		ls = append(ls, strings.TrimSpace(logPrefix.ReplaceAllString(l, "")))
	}
	return ls
}

func pct(x float64) string { return strconv.FormatFloat(100*x, 'f', 0, 64) + "%" }

func dur(d time.Duration) string {
	switch {
	case d >= 10*time.Millisecond:
		return d.Round(time.Millisecond).String()
	case d >= 10*time.Microsecond:
		return d.Round(time.Microsecond).String()
	default:
		return d.Round(100 * time.Nanosecond).String()
	}
}

// --- bench/broadcast -----------------------------------------------------

// broadcastRow is one line of bench/broadcast's fixed-column table.
type broadcastRow struct {
	name     string
	clients  int
	rate     float64
	p50, p99 time.Duration
	cpu      time.Duration
}

var (
	broadcastLine   = regexp.MustCompile(`^(.+?)\s{2,}(\d+)\s+(\d+(?:\.\d+)?)\s+(\S+)\s+(\S+)\s+(\S+)\s+(-?\d+(?:\.\d+)?)$`)
	broadcastRounds = regexp.MustCompile(`(\d+) clients: ([\d.]+) catalog commit rounds \(fsyncs\) and ([\d.]+) commits per broadcast`)
	broadcastFailed = regexp.MustCompile(`FAILED:(\d+)`)
)

// ParseBroadcast turns bench/broadcast's TestReport table into rows with
// issue 4's targets: in-process at 256 clients ≥ 5 broadcasts per raw
// fsync; over HTTP at 64 clients ≥ 0.3× the minimal handler; at 1 client
// p50 ≤ 3 raw fsync latencies.
func ParseBroadcast(out string) ([]Row, error) {
	const bench = "broadcast"
	var tbl []broadcastRow
	rounds := map[int][2]float64{} // clients -> commit rounds, commits per broadcast
	failed := ""
	for _, l := range lines(out) {
		if m := broadcastLine.FindStringSubmatch(l); m != nil {
			var r broadcastRow
			var err1, err2, err3 error
			r.name = strings.TrimSpace(m[1])
			r.clients, _ = strconv.Atoi(m[2])
			r.rate, _ = strconv.ParseFloat(m[3], 64)
			r.p50, err1 = time.ParseDuration(m[4])
			r.p99, err2 = time.ParseDuration(m[5])
			r.cpu, err3 = time.ParseDuration(m[6])
			if err1 == nil && err2 == nil && err3 == nil {
				tbl = append(tbl, r)
			}
			continue
		}
		if strings.HasPrefix(l, "in-process:") {
			for _, m := range broadcastRounds.FindAllStringSubmatch(l, -1) {
				c, _ := strconv.Atoi(m[1])
				a, _ := strconv.ParseFloat(m[2], 64)
				b, _ := strconv.ParseFloat(m[3], 64)
				rounds[c] = [2]float64{a, b}
			}
		}
		if strings.HasPrefix(l, "tasks:") {
			if m := broadcastFailed.FindStringSubmatch(l); m != nil && m[1] != "0" {
				failed = m[1] + " broadcasts ended FAILED during the run"
			}
		}
	}
	find := func(prefix string, clients int) (broadcastRow, bool) {
		for _, r := range tbl {
			if strings.HasPrefix(r.name, prefix) && (clients == 0 || r.clients == clients) {
				return r, true
			}
		}
		return broadcastRow{}, false
	}
	fs, ok1 := find("raw fsync", 0)
	mh, ok2 := find("minimal net/http", 0)
	if !ok1 || !ok2 {
		return nil, fmt.Errorf("report: broadcast: no raw fsync / minimal handler row in its table (format changed?)")
	}
	detail := func(r broadcastRow) string {
		per := "op"
		if strings.HasPrefix(r.name, "in-process") || strings.HasPrefix(r.name, "HTTP") {
			per = "broadcast"
		}
		s := fmt.Sprintf("p50 %s, p99 %s, CPU %s per %s", dur(r.p50), dur(r.p99), dur(r.cpu), per)
		if rc, ok := rounds[r.clients]; ok && strings.HasPrefix(r.name, "in-process") {
			s += fmt.Sprintf("; %.2f commit rounds (fsyncs) and %.1f commits per broadcast", rc[0], rc[1])
		}
		return s
	}
	// why explains a throughput miss: CPU-bound or waiting (see cpuBound),
	// with the latencies and commit rounds (fsyncs) per broadcast.
	why := func(r broadcastRow, need float64) string {
		// detail carries the commit rounds (fsyncs) per broadcast.
		return fmt.Sprintf("needs %.0f/s; ", need) + cpuBound(r.rate, need, r.cpu, "broadcast") + "; " + detail(r)
	}
	const fsBase = "raw fsync (4 KiB write + fdatasync), 1 writer"
	var rows []Row
	add := func(r Row, why string) {
		r = r.Finish()
		if r.Met != nil && !*r.Met {
			r.Note = why
		}
		if failed != "" {
			r.Note += "; " + failed
		}
		rows = append(rows, r)
	}
	if r, ok := find("in-process Submit", 256); ok {
		add(Row{Bench: bench, Figure: "FastAck to 4 vchannels, in-process, 256 clients", Value: r.rate, Unit: "broadcasts/s",
			Baseline: fsBase, BaseVal: fs.rate, BaseUnit: "fsyncs/s", Target: "≥ 5 per raw fsync", MinRatio: 5, Note: detail(r)}, why(r, 5*fs.rate))
	} else {
		rows = append(rows, Row{Bench: bench, Figure: "FastAck, in-process, 256 clients", Target: "≥ 5 per raw fsync", Missing: "no such row in bench/broadcast's table"})
	}
	if r, ok := find("HTTP POST", 64); ok {
		add(Row{Bench: bench, Figure: "FastAck over HTTP, 64 clients", Value: r.rate, Unit: "broadcasts/s",
			Baseline: "minimal net/http JSON handler, 64 clients", BaseVal: mh.rate, BaseUnit: "requests/s", Target: "≥ 0.3× minimal handler", MinRatio: 0.3,
			Note: detail(r)}, why(r, 0.3*mh.rate)+fmt.Sprintf(" (minimal handler: %s CPU per request)", dur(mh.cpu)))
	} else {
		rows = append(rows, Row{Bench: bench, Figure: "FastAck over HTTP, 64 clients", Target: "≥ 0.3× minimal handler", Missing: "no such row in bench/broadcast's table"})
	}
	if r, ok := find("in-process Submit", 1); ok {
		note := fmt.Sprintf("%.0f broadcasts/s", r.rate)
		reason := ""
		if rc, ok := rounds[1]; ok {
			reason = fmt.Sprintf("%.2f commit rounds (fsyncs) per broadcast at 1 client, each ≈ one raw fsync latency (%s), %.1f commits per broadcast",
				rc[0], dur(fs.p50), rc[1])
		}
		add(Row{Bench: bench, Figure: "FastAck in-process, 1 client: p50 latency", Value: float64(r.p50.Microseconds()), Unit: "µs",
			Baseline: "raw fsync p50 latency", BaseVal: float64(fs.p50.Microseconds()), Target: "≤ 3× raw fsync p50", MaxRatio: 3,
			Note: note}, reason+"; "+detail(r))
	}
	// Context: every other row against raw fsync, no target.
	for _, r := range tbl {
		if r.name == fs.name || r.name == mh.name ||
			(strings.HasPrefix(r.name, "in-process") && r.clients == 256) || (strings.HasPrefix(r.name, "HTTP") && r.clients == 64) {
			continue
		}
		fig := fmt.Sprintf("%s, %d clients", r.name, r.clients)
		if r.clients == 1 {
			fig = fmt.Sprintf("%s, 1 client", r.name)
		}
		unit := "broadcasts/s"
		if !strings.HasPrefix(r.name, "in-process") && !strings.HasPrefix(r.name, "HTTP") {
			unit = "ops/s"
		}
		add(Row{Bench: bench, Figure: fig, Value: r.rate, Unit: unit, Baseline: fsBase, BaseVal: fs.rate, BaseUnit: "fsyncs/s", Note: detail(r)}, "")
	}
	return rows, nil
}

// --- bench/plugins -------------------------------------------------------

type pluginRow struct{ cpu, wall float64 }

// ParsePlugins turns bench/plugins' TestPluginCallTable Markdown table into
// rows with issue 3's target: hostd's 256-byte ack call at least 5× cheaper
// (CPU per call) than the same call through the Extism Go SDK; and the
// ratio to native Go for each payload.
func ParsePlugins(out string) ([]Row, error) {
	const bench = "plugins"
	tbl := map[string]pluginRow{} // variant/size
	var sizes []string
	for _, l := range lines(out) {
		if !strings.HasPrefix(l, "|") {
			continue
		}
		c := strings.Split(strings.Trim(l, "|"), "|")
		if len(c) < 4 {
			continue
		}
		for i := range c {
			c[i] = strings.TrimSpace(c[i])
		}
		cpu, err1 := strconv.ParseFloat(c[2], 64)
		wall, err2 := strconv.ParseFloat(c[3], 64)
		if err1 != nil || err2 != nil {
			continue // header or separator
		}
		if c[0] == "native" {
			sizes = append(sizes, c[1])
		}
		tbl[c[0]+"/"+c[1]] = pluginRow{cpu, wall}
	}
	if len(sizes) == 0 {
		return nil, fmt.Errorf("report: plugins: no table with a native row found (format changed?)")
	}
	get := func(v, s string) (float64, bool) { r, ok := tbl[v+"/"+s]; return r.cpu, ok }
	// where says where a hostd call's CPU goes, from the variants measured
	// beside it in the same run.
	where := func(s string) string {
		h, _ := get("hostd", s)
		var parts []string
		part := func(label string, v float64) {
			parts = append(parts, fmt.Sprintf("%s %s", label, dur(time.Duration(max(v, 0)))))
		}
		if nk, ok := get("hostd-no-kv", s); ok {
			part("result KV write (hostd − hostd-no-kv)", h-nk)
			if lz, ok := get("hostd-lazy-decode", s); ok {
				part("SDK envelope decode (hostd-no-kv − hostd-lazy-decode)", nk-lz)
			}
		}
		if e, ok := get("hostd-empty-handler", s); ok {
			part("fixed cost of a call through hostd's runtime (empty handler)", e)
		}
		if w, ok := get("wazero-raw", s); ok {
			part("the same work exported from a guest and called through bare wazero (the floor)", w)
		}
		return fmt.Sprintf("where hostd's %s CPU per call goes (same run): %s", dur(time.Duration(h)), strings.Join(parts, "; "))
	}
	var rows []Row
	for _, s := range sizes {
		h, okH := get("hostd", s)
		n, _ := get("native", s)
		e, okE := get("extism", s)
		if !okH {
			return rows, fmt.Errorf("report: plugins: no hostd row for %s", s)
		}
		wall := tbl["hostd/"+s].wall
		if okE {
			r := Row{Bench: bench, Figure: "ack callback, " + s + " payload: hostd CPU per call", Value: h, Unit: "ns",
				Baseline: "Extism Go SDK, same call", BaseVal: e, Note: fmt.Sprintf("Extism is %.2f× hostd's cost; wall %s per call", e/h, dur(time.Duration(wall)))}
			if s == "256B" {
				r.Target, r.MaxRatio = "≤ 0.2× Extism (≥ 5× cheaper)", 0.2
			}
			r = r.Finish()
			if r.Met != nil && !*r.Met {
				r.Note = fmt.Sprintf("Extism is %.2f× hostd's cost, target 5×; %s", e/h, where(s))
			}
			rows = append(rows, r)
		} else {
			rows = append(rows, Row{Bench: bench, Figure: "ack callback, " + s + " payload: hostd CPU per call", Baseline: "Extism Go SDK, same call",
				Missing: "no Extism row in the table (bench/extism did not run)"})
		}
		if n > 0 {
			rows = append(rows, Row{Bench: bench, Figure: "ack callback, " + s + " payload: hostd CPU per call", Value: h, Unit: "ns",
				Baseline: "native Go function, same work", BaseVal: n, Note: where(s)}.Finish())
		}
	}
	return rows, nil
}

// --- bench/locks ---------------------------------------------------------

var (
	// a row of the table: name, pairs/s, three ratio columns and (since
	// the table grew one) an optional process CPU per pair.
	locksLine   = regexp.MustCompile(`^(fsync|[a-z-]+/c=\d+)\s+(\d+(?:\.\d+)?)\s+\S+\s+\S+\s+\S+(?:\s+(\S+))?$`)
	locksRounds = regexp.MustCompile(`^(hostd/c=\d+): \d+ pairs/s, \d+ commit rounds, ([\d.]+) writers/round`)
	locksMedian = regexp.MustCompile(`^hostd/c=64 / minimal/c=64 per round \(adjacent slices\): (\[[^\]]*\]), median ([\d.]+)`)
)

// LocksRedisMissing is what bench/locks prints when redis-server is not
// installed (its Redis rows are skipped).
const LocksRedisMissing = "redis-server is not installed"

// cpuBound explains a rate that misses need: CPU-bound when the process's
// CPU per operation caps this machine's CPUs near the rate reached, else
// waiting.
func cpuBound(rate, need float64, cpu time.Duration, what string) string {
	if cpu <= 0 {
		return ""
	}
	cpus := float64(runtime.NumCPU())
	ceiling := cpus / cpu.Seconds()
	if rate >= 0.7*ceiling {
		return fmt.Sprintf("CPU-bound: %s process CPU per %s caps %d CPUs at %.0f/s; the target needs ≤ %s per %s",
			dur(cpu), what, runtime.NumCPU(), ceiling, dur(time.Duration(cpus/need*float64(time.Second))), what)
	}
	return fmt.Sprintf("not CPU-bound (%s process CPU per %s would allow %.0f/s): the time goes to waiting", dur(cpu), what, ceiling)
}

// ParseLocks turns bench/locks' BenchmarkLockPairs table (pairs/s of the
// best slice per system) into rows with issue 5's target: at 64 clients
// ≥ 0.5× the minimal handler's pair rate, hostd's grants fsynced before
// the reply; at 1 client hostd next to the raw fsync rate; Redis with and
// without persistence as context. Missing Redis rows say why.
func ParseLocks(out string) ([]Row, error) {
	const bench = "locks"
	pairs := map[string]float64{}
	cpu := map[string]time.Duration{}
	perRound := map[string]string{}
	median := ""
	redisMissing := strings.Contains(out, LocksRedisMissing)
	for _, l := range lines(out) {
		if m := locksLine.FindStringSubmatch(l); m != nil {
			pairs[m[1]], _ = strconv.ParseFloat(m[2], 64)
			if d, err := time.ParseDuration(m[3]); err == nil {
				cpu[m[1]] = d
			}
		}
		if m := locksRounds.FindStringSubmatch(l); m != nil {
			perRound[m[1]] = m[2]
		}
		if m := locksMedian.FindStringSubmatch(l); m != nil {
			median = fmt.Sprintf("median per-round ratio %s (adjacent slices: %s)", m[2], m[1])
		}
	}
	h64, h1, m64, fs := pairs["hostd/c=64"], pairs["hostd/c=1"], pairs["minimal/c=64"], pairs["fsync"]
	if h64 == 0 || m64 == 0 || fs == 0 {
		return nil, fmt.Errorf("report: locks: no hostd/minimal/fsync rows in its table (format changed?)")
	}
	const fig64 = "lease acquire+release over HTTP, 64 clients, distinct keys"
	note := fmt.Sprintf("%.2f pairs per raw fsync", h64/fs)
	if w := perRound["hostd/c=64"]; w != "" {
		note += "; " + w + " writers per catalog commit round"
	}
	if c := cpu["hostd/c=64"]; c > 0 {
		note += fmt.Sprintf("; process CPU %s per pair (minimal handler %s)", dur(c), dur(cpu["minimal/c=64"]))
	}
	if median != "" {
		note = "best slices; " + median + "; " + note
	}
	var rows []Row
	r := Row{Bench: bench, Figure: fig64, Value: h64, Unit: "pairs/s",
		Baseline: "minimal net/http JSON handler, 2 requests per pair, 64 clients", BaseVal: m64,
		Target: "≥ 0.5× minimal handler (grants fsynced)", MinRatio: 0.5, Note: note}.Finish()
	if !*r.Met {
		why := fmt.Sprintf("needs %.0f pairs/s", 0.5*m64)
		if b := cpuBound(h64, 0.5*m64, cpu["hostd/c=64"], "pair"); b != "" {
			why += "; " + b
		}
		r.Note = why + "; " + note
	}
	rows = append(rows, r)
	rows = append(rows, Row{Bench: bench, Figure: "lease acquire+release over HTTP, 1 client", Value: h1, Unit: "pairs/s",
		Baseline: "raw write+fdatasync, 1 writer", BaseVal: fs, BaseUnit: "fsyncs/s", Note: "bounded by the fsync rate: each pair waits for its durable commits"}.Finish())
	for _, rb := range []struct{ key, name string }{{"redis-fsync", "Redis appendfsync always"}, {"redis-nopersist", "Redis without persistence"}} {
		for _, c := range []string{"64", "1"} {
			fig := fmt.Sprintf("lease acquire+release over HTTP, %s clients", c)
			if c == "1" {
				fig = "lease acquire+release over HTTP, 1 client"
			}
			base := fmt.Sprintf("%s: SET NX PX + Lua compare-and-delete, %s clients", rb.name, c)
			if c == "1" {
				base = rb.name + ": SET NX PX + Lua compare-and-delete, 1 client"
			}
			v := pairs[rb.key+"/c="+c]
			switch {
			case v > 0:
				rows = append(rows, Row{Bench: bench, Figure: fig, Value: pairs["hostd/c="+c], Unit: "pairs/s", Baseline: base, BaseVal: v}.Finish())
			case redisMissing:
				rows = append(rows, Row{Bench: bench, Figure: fig, Baseline: base,
					Missing: "redis-server is not installed: `make bench` installs Debian's redis-server when apt-get can (else: apt-get install -y redis-server)"})
			default:
				rows = append(rows, Row{Bench: bench, Figure: fig, Baseline: base, Missing: "no " + rb.key + " row in bench/locks' table"})
			}
		}
	}
	if np := pairs["redis-nopersist/c=64"]; np > 0 {
		rows = append(rows, Row{Bench: bench, Figure: "minimal net/http JSON handler, 2 requests per pair, 64 clients", Value: m64, Unit: "pairs/s",
			Baseline: "Redis without persistence, 64 clients", BaseVal: np, Note: "the ceiling of any HTTP API on this machine vs Redis (issue 5 measured about 0.5×)"}.Finish())
	}
	return rows, nil
}

package catalogbench

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hostd-dev/hostd/bench/baseline"
	"github.com/hostd-dev/hostd/bench/report"
	"github.com/hostd-dev/hostd/runtime/catalog"
)

func duration() time.Duration {
	if s := os.Getenv("HOSTD_BENCH_SECONDS"); s != "" {
		if n, err := strconv.ParseFloat(s, 64); err == nil && n > 0 {
			return time.Duration(n * float64(time.Second))
		}
	}
	return 500 * time.Millisecond
}

const valueSize = 128

// TestReport measures the committer against raw Badger and raw fsync in the
// same run and emits the rows of the benchmark report. Each figure is the
// best of three slices interleaved with its baseline's, so a burst of load
// from elsewhere on a shared machine hits both sides alike.
func TestReport(t *testing.T) {
	const slices = 3
	d := duration() / slices
	dir := t.TempDir()
	var fsr []baseline.Result
	for range slices {
		r, err := baseline.Fsync(dir, 1, valueSize, d)
		if err != nil {
			t.Fatal(err)
		}
		fsr = append(fsr, r)
	}
	fs := baseline.Best(fsr...)
	t.Log(fs)
	var rows []report.Row
	for _, c := range []int{1, 16, 256} {
		raw, err := baseline.NewBadger(dir)
		if err != nil {
			t.Fatal(err)
		}
		db, err := catalog.Open(catalog.DefaultOptions(t.TempDir()))
		if err != nil {
			t.Fatal(err)
		}
		val := make([]byte, valueSize)
		var seq atomic.Uint64
		var raws, crs []baseline.Result
		for range slices {
			r, err := raw.Run(c, valueSize, d)
			if err != nil {
				t.Fatal(err)
			}
			raws = append(raws, r)
			cr, err := baseline.Run("catalog Commit", c, d, func(w int) error {
				key := fmt.Appendf(nil, "bench/%d/%d", w, seq.Add(1)%1024)
				_, err := db.Commit(context.Background(), &catalog.Batch{Ops: []catalog.Op{{Key: key, Value: val}}})
				return err
			})
			if err != nil {
				t.Fatal(err)
			}
			crs = append(crs, cr)
		}
		st := db.Stats()
		db.Close()
		raw.Close()
		rb, cr := baseline.Best(raws...), baseline.Best(crs...)
		t.Log(rb)
		t.Log(cr, fmt.Sprintf("rounds %d, txns %d", st.Rounds, st.Txns))
		perTxn := float64(st.Committed) / float64(max(st.Txns, 1))
		note := fmt.Sprintf("%.1f commits per Badger txn; p50 %v (raw Badger %v)", perTxn, cr.P50.Round(time.Microsecond), rb.P50.Round(time.Microsecond))
		writers := fmt.Sprintf("%d writers", c)
		if c == 1 {
			writers = "1 writer"
		}
		fig := "durable 1-key Commit, " + writers
		rowB := report.Row{Bench: "catalog", Figure: fig, Value: cr.Rate(), Unit: "commits/s",
			Baseline: "raw Badger sync txn, " + writers, BaseVal: rb.Rate(), Note: note}
		rowF := report.Row{Bench: "catalog", Figure: fig, Value: cr.Rate(), Unit: "commits/s",
			Baseline: "raw write+fdatasync, 1 writer", BaseVal: fs.Rate(), BaseUnit: "fsyncs/s",
			Note: fmt.Sprintf("%.1f commits per Badger txn (one fsync each); raw fsync p50 %v", perTxn, fs.P50.Round(time.Microsecond))}
		// Issue 2 asks for "far fewer Badger transactions than writes" at
		// 256 writers; the rate targets are this package's own reading of
		// that (see doc.go).
		switch c {
		case 1:
			rowB.Target, rowB.MinRatio = "≥ 0.5× raw Badger (bench goal)", 0.5
		case 256:
			rowB.Target, rowB.MinRatio = "≥ 10× raw Badger (bench goal)", 10
			rowF.Target, rowF.MinRatio = "≥ 5× raw fsync (bench goal)", 5
		}
		rows = append(rows, rowB, rowF)
		if c == 256 {
			rows = append(rows, report.Row{Bench: "catalog", Figure: "commits per Badger transaction, 256 writers", Value: perTxn, Unit: "commits/txn",
				Baseline: "raw Badger: one txn per commit", BaseVal: 1, Target: "far fewer txns than writes (issue 2; read as ≥ 10)", MinRatio: 10,
				Note: fmt.Sprintf("%d commits in %d txns", st.Committed, st.Txns)})
		}
	}
	for i := range rows {
		rows[i] = rows[i].Finish()
		if rows[i].Met != nil && !*rows[i].Met {
			rows[i].Note += fmt.Sprintf("; missed with 1-min load average %s on %d CPUs (shared machine)", baseline.LoadAvg(), runtime.NumCPU())
		}
	}
	if err := report.Emit(t.Logf, rows...); err != nil {
		t.Fatal(err)
	}
}

// BenchmarkCommitParallel: durable single-key Commits from par×GOMAXPROCS
// goroutines; commits/txn shows how many share one Badger transaction.
func BenchmarkCommitParallel(b *testing.B) {
	for _, p := range []int{1, 16, 256} {
		b.Run(fmt.Sprintf("par=%d", p), func(b *testing.B) {
			db, err := catalog.Open(catalog.DefaultOptions(b.TempDir()))
			if err != nil {
				b.Fatal(err)
			}
			defer db.Close()
			val := make([]byte, valueSize)
			var seq atomic.Uint64
			b.SetParallelism(p)
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					key := fmt.Appendf(nil, "bench/%d", seq.Add(1)%4096)
					if _, err := db.Commit(context.Background(), &catalog.Batch{Ops: []catalog.Op{{Key: key, Value: val}}}); err != nil {
						b.Error(err)
						return
					}
				}
			})
			st := db.Stats()
			b.ReportMetric(float64(st.Committed)/float64(max(st.Txns, 1)), "commits/txn")
		})
	}
}

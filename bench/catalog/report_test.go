package catalogbench

import (
	"context"
	"fmt"
	"os"
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

// commitRun measures single-key durable Commits from workers goroutines.
func commitRun(t testing.TB, workers int, d time.Duration) (baseline.Result, catalog.Stats) {
	db, err := catalog.Open(catalog.DefaultOptions(t.TempDir()))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	val := make([]byte, valueSize)
	var seq atomic.Uint64
	before := db.Stats()
	r, err := baseline.Run("catalog Commit", workers, d, func(w int) error {
		key := fmt.Appendf(nil, "bench/%d/%d", w, seq.Add(1)%1024)
		_, err := db.Commit(context.Background(), &catalog.Batch{Ops: []catalog.Op{{Key: key, Value: val}}})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	after := db.Stats()
	return r, catalog.Stats{Rounds: after.Rounds - before.Rounds, Txns: after.Txns - before.Txns, Committed: after.Committed - before.Committed}
}

// TestReport measures the committer against raw Badger and raw fsync in the
// same run and emits the rows of the benchmark report.
func TestReport(t *testing.T) {
	d := duration()
	dir := t.TempDir()
	fs, err := baseline.Fsync(dir, 1, valueSize, d)
	if err != nil {
		t.Fatal(err)
	}
	t.Log(fs)
	var rows []report.Row
	for _, c := range []int{1, 16, 256} {
		raw, err := baseline.BadgerSync(dir, c, valueSize, d)
		if err != nil {
			t.Fatal(err)
		}
		cr, st := commitRun(t, c, d)
		t.Log(raw)
		t.Log(cr, fmt.Sprintf("rounds %d, txns %d", st.Rounds, st.Txns))
		perTxn := float64(st.Committed) / float64(max(st.Txns, 1))
		note := fmt.Sprintf("%.1f commits per Badger txn; p50 %v (raw badger %v)", perTxn, cr.P50.Round(time.Microsecond), raw.P50.Round(time.Microsecond))
		fig := fmt.Sprintf("durable 1-key Commit, %d writers", c)
		rb := report.Row{Bench: "catalog", Figure: fig, Value: cr.Rate(), Unit: "commits/s",
			Baseline: fmt.Sprintf("raw Badger sync txn, %d writers", c), BaseVal: raw.Rate(), Note: note}
		rf := report.Row{Bench: "catalog", Figure: fig, Value: cr.Rate(), Unit: "commits/s",
			Baseline: "raw write+fdatasync, 1 writer", BaseVal: fs.Rate()}
		switch c {
		case 1:
			rb.Target, rb.MinRatio = "≥ 0.5× raw Badger", 0.5
		case 256:
			rb.Target, rb.MinRatio = "≥ 10× raw Badger", 10
			rf.Target, rf.MinRatio = "≥ 5× raw fsync", 5
		}
		rows = append(rows, rb, rf)
	}
	rows = append(rows, report.Row{Bench: "catalog", Figure: "raw write+fdatasync p50 latency", Value: float64(fs.P50.Microseconds()), Unit: "µs", Note: fmt.Sprintf("%.0f fsyncs/s", fs.Rate())})
	for i := range rows {
		rows[i] = rows[i].Finish()
		if rows[i].Met != nil && !*rows[i].Met && rows[i].Note == "" {
			rows[i].Note = "missed on this run; see the commits per txn in the Badger row"
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

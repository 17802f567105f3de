package baseline_test

import (
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/hostd-dev/hostd/bench/baseline"
	"github.com/hostd-dev/hostd/bench/report"
)

// TestReport measures the machine's floors that the other packages compare
// with — the disk's write+fdatasync, raw Badger sync transactions and a
// minimal net/http JSON handler — against each other, so the report says
// what kind of machine its ratios come from. No targets: context only.
func TestReport(t *testing.T) {
	d := 500 * time.Millisecond
	if v, err := strconv.ParseFloat(os.Getenv("HOSTD_BENCH_SECONDS"), 64); err == nil && v > 0 {
		d = time.Duration(v * float64(time.Second))
	}
	dir := t.TempDir()
	fs, err := baseline.Fsync(dir, 1, 128, d)
	if err != nil {
		t.Fatal(err)
	}
	fs16, err := baseline.Fsync(dir, 16, 128, d)
	if err != nil {
		t.Fatal(err)
	}
	bg, err := baseline.BadgerSync(dir, 1, 128, d)
	if err != nil {
		t.Fatal(err)
	}
	h1, err := baseline.HTTPJSON(1, d)
	if err != nil {
		t.Fatal(err)
	}
	h64, err := baseline.HTTPJSON(64, d)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range []baseline.Result{fs, fs16, bg, h1, h64} {
		t.Log(r)
	}
	lat := func(r baseline.Result) string {
		return fmt.Sprintf("p50 %v, p99 %v, CPU %v per op", r.P50.Round(time.Microsecond), r.P99.Round(time.Microsecond), r.CPUPerOp().Round(time.Microsecond))
	}
	rows := []report.Row{
		{Figure: "raw Badger single-key sync txn, 1 writer", Value: bg.Rate(), Unit: "ops/s",
			Baseline: "raw write+fdatasync of 128 B, 1 writer", BaseVal: fs.Rate(), Note: lat(bg) + "; fsync " + lat(fs)},
		{Figure: "raw write+fdatasync of 128 B, 16 writers (16 files)", Value: fs16.Rate(), Unit: "ops/s",
			Baseline: "same, 1 writer", BaseVal: fs.Rate(), Note: "how far the disk itself overlaps concurrent fsyncs; " + lat(fs16)},
		{Figure: "minimal net/http JSON handler, 64 clients", Value: h64.Rate(), Unit: "requests/s",
			Baseline: "same, 1 client", BaseVal: h1.Rate(), Note: lat(h64)},
	}
	for i := range rows {
		rows[i].Bench = "machine"
	}
	if err := report.Emit(t.Logf, rows...); err != nil {
		t.Fatal(err)
	}
}

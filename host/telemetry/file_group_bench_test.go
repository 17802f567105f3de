package telemetry

import (
	"context"
	"fmt"
	"syscall"
	"testing"
	"time"
)

// BenchmarkFileSpanProcessorParallel ends one typical span per op through
// the file span processor from many goroutines at once, as the daemon's
// request goroutines do (p is goroutines per CPU; 32 on 2 CPUs is the 64
// clients of the lease profile). cpu-ns/op is the process's user+system
// CPU per span (what tracing costs the daemon); spans/write shows the
// grouping. Files rotate at 8 MiB so the run stays
// small on disk.
func BenchmarkFileSpanProcessorParallel(b *testing.B) {
	span := typicalSpan(b)
	for _, p := range []int{1, 32} {
		b.Run(fmt.Sprintf("p=%d", p), func(b *testing.B) {
			exp, err := NewFileExporter(FileExporterConfig{Dir: b.TempDir(), MaxSize: 8 << 20, MaxFiles: 2})
			if err != nil {
				b.Fatal(err)
			}
			proc := NewFileSpanProcessor(exp, func(err error) { b.Error(err) })
			defer proc.Shutdown(context.Background())
			b.SetParallelism(p)
			b.ReportAllocs()
			cpu0 := processCPU()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					proc.OnEnd(span)
				}
			})
			b.StopTimer()
			b.ReportMetric(float64(processCPU()-cpu0)/float64(b.N), "cpu-ns/op")
			st := exp.Stats()
			if st.Errors != 0 {
				b.Fatalf("stats %+v", st)
			}
			if st.Writes > 0 {
				b.ReportMetric(float64(st.Spans)/float64(st.Writes), "spans/write")
			}
		})
	}
}

// processCPU is the process's user+system CPU time so far.
func processCPU() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

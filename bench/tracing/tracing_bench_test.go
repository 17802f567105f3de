package tracing

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/hostd-dev/hostd/client"
	"github.com/hostd-dev/hostd/host"
	"github.com/hostd-dev/hostd/host/config"
	"github.com/hostd-dev/hostd/host/telemetry"
)

const clients = 32

// rounds of none/file, alternating, so drift on a shared machine hits both.
const rounds = 5

var vchannels = []string{"orders/0", "orders/1"}

func startHostd(b testing.TB, exporter string) (*client.Client, string) {
	cfg := config.Default()
	cfg.API.Listen = "127.0.0.1:0"
	cfg.Data.Dir = b.TempDir()
	cfg.Telemetry.Traces.Exporter = exporter
	cfg.Broadcast.Vchannels = vchannels
	h, err := host.Open(context.Background(), &cfg, host.Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		b.Fatal(err)
	}
	if err := h.Start(context.Background()); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = h.Shutdown(context.Background()) })
	c, err := client.New(h.URL(), client.WithHTTPClient(&http.Client{
		Transport: &http.Transport{MaxIdleConns: 256, MaxIdleConnsPerHost: 256}}))
	if err != nil {
		b.Fatal(err)
	}
	return c, cfg.Data.Dir
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// run submits b.N noop broadcasts (wait=done) from `clients` goroutines,
// each on its own collection key so they do not serialize on locks. It
// returns the process CPU time spent (server and clients).
func run(b *testing.B, c *client.Client) time.Duration {
	var next atomic.Int64
	var wg sync.WaitGroup
	var failed atomic.Value
	ctx := context.Background()
	cpu0 := cpuTime()
	b.ResetTimer()
	for w := range clients {
		wg.Go(func() {
			for next.Add(1) <= int64(b.N) {
				res, err := c.SubmitBroadcast(ctx, &client.BroadcastRequest{Type: "noop", PayloadText: "x",
					VChannels:    vchannels,
					ResourceKeys: []client.ResourceKey{{Domain: "collection", Key: fmt.Sprint("c", w), Mode: "exclusive"}}})
				if err != nil {
					failed.Store(err)
					return
				}
				if res.State != "TOMBSTONE" {
					failed.Store(fmt.Errorf("broadcast %d ended %s", res.ID, res.State))
					return
				}
			}
		})
	}
	wg.Wait()
	b.StopTimer()
	cpu := cpuTime() - cpu0
	if err, _ := failed.Load().(error); err != nil {
		b.Fatal(err)
	}
	return cpu
}

func BenchmarkBroadcastTracing(b *testing.B) {
	last := map[string]float64{}    // sub-benchmark name -> rate of its last (largest) run
	lastCPU := map[string]float64{} // ... and its CPU µs per broadcast
	for round := 1; round <= rounds; round++ {
		for _, exp := range []string{"none", "file"} {
			b.Run(fmt.Sprintf("exporter=%s/round=%d", exp, round), func(b *testing.B) {
				c, dir := startHostd(b, exp)
				cpu := run(b, c)
				rate := float64(b.N) / b.Elapsed().Seconds()
				cpuPer := float64(cpu.Microseconds()) / float64(b.N)
				b.ReportMetric(rate, "broadcasts/s")
				b.ReportMetric(cpuPer, "cpu-µs/broadcast")
				b.ReportMetric(0, "ns/op")
				last[fmt.Sprintf("%s/%d", exp, round)] = rate
				lastCPU[fmt.Sprintf("%s/%d", exp, round)] = cpuPer
				if exp == "file" {
					fi, err := os.Stat(filepath.Join(telemetry.TraceDir(dir), telemetry.TraceFileName))
					if err != nil || fi.Size() == 0 {
						b.Fatalf("file exporter wrote nothing: %v", err)
					}
					b.ReportMetric(float64(fi.Size())/float64(b.N), "trace-bytes/broadcast")
				}
			})
		}
	}
	rates, cpus := map[string][]float64{}, map[string][]float64{}
	for round := 1; round <= rounds; round++ {
		for _, exp := range []string{"none", "file"} {
			if r, ok := last[fmt.Sprintf("%s/%d", exp, round)]; ok {
				rates[exp] = append(rates[exp], r)
				cpus[exp] = append(cpus[exp], lastCPU[fmt.Sprintf("%s/%d", exp, round)])
			}
		}
	}
	if len(rates["none"]) > 0 && len(rates["file"]) > 0 {
		none, file := median(rates["none"]), median(rates["file"])
		fmt.Printf("\nbroadcast throughput, %d clients, %d vchannels + control, wait=done:\n", clients, len(vchannels))
		fmt.Printf("  exporter none  %8.0f broadcasts/s median (rounds %v)\n", none, fmtRates(rates["none"]))
		fmt.Printf("  exporter file  %8.0f broadcasts/s median (rounds %v)\n", file, fmtRates(rates["file"]))
		fmt.Printf("  file/none = %.3f (loss %.1f%%; target <= 10%%)\n", file/none, 100*(1-file/none))
		cn, cf := median(cpus["none"]), median(cpus["file"])
		fmt.Printf("  CPU per broadcast (process, median): none %.0fµs, file %.0fµs, file/none = %.3f\n\n", cn, cf, cf/cn)
	}
}

func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	if n := len(s); n%2 == 1 {
		return s[n/2]
	} else {
		return (s[n/2-1] + s[n/2]) / 2
	}
}

func fmtRates(xs []float64) []string {
	out := make([]string, len(xs))
	for i, x := range xs {
		out[i] = fmt.Sprintf("%.0f", x)
	}
	return out
}

// BenchmarkSpanExport: one span start+end, through the file exporter
// (synchronous, one write per span) vs a provider with no processor.
func BenchmarkSpanExport(b *testing.B) {
	for _, name := range []string{"none", "file"} {
		b.Run("exporter="+name, func(b *testing.B) {
			var opts []sdktrace.TracerProviderOption
			if name == "file" {
				exp, err := telemetry.NewFileExporter(telemetry.FileExporterConfig{Dir: b.TempDir()})
				if err != nil {
					b.Fatal(err)
				}
				opts = append(opts, sdktrace.WithSpanProcessor(telemetry.NewFileSpanProcessor(exp, nil)))
			}
			tp := sdktrace.NewTracerProvider(opts...)
			defer tp.Shutdown(context.Background())
			tr := tp.Tracer("bench")
			ctx := context.Background()
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					_, s := tr.Start(ctx, "send orders/0", trace.WithSpanKind(trace.SpanKindClient))
					s.End()
				}
			})
		})
	}
}

// BenchmarkBroadcastTracingAB runs two daemons at the same time — exporter
// none and file, `clients` clients each — for a fixed window per round, so
// the load of everything else on the machine falls on both alike (the
// sequential rounds of BenchmarkBroadcastTracing are at its mercy). It
// reports the completed broadcasts of each and the ratio file/none.
func BenchmarkBroadcastTracingAB(b *testing.B) {
	const window = 3 * time.Second
	cn, _ := startHostd(b, "none")
	cf, _ := startHostd(b, "file")
	var none, file int64
	var ratios []float64
	for round := 0; round < b.N || round < rounds; round++ {
		n, f := abRound(b, cn, cf, window)
		none += n
		file += f
		ratios = append(ratios, float64(f)/float64(max(n, 1)))
	}
	b.ReportMetric(float64(none)/float64(len(ratios))/window.Seconds(), "none-broadcasts/s")
	b.ReportMetric(float64(file)/float64(len(ratios))/window.Seconds(), "file-broadcasts/s")
	b.ReportMetric(float64(file)/float64(max(none, 1)), "file/none")
	b.ReportMetric(0, "ns/op")
	fmt.Printf("\nA/B at the same time, %d clients each, %d rounds of %v: none %d, file %d broadcasts; file/none = %.3f (rounds %v)\n\n",
		clients, len(ratios), window, none, file, float64(file)/float64(max(none, 1)), fmtRates100(ratios))
}

// abRound runs `clients` clients against each of cn (exporter none) and cf
// (exporter file) at the same time for window and returns how many
// broadcasts each completed.
func abRound(tb testing.TB, cn, cf *client.Client, window time.Duration) (none, file int64) {
	ctx, cancel := context.WithTimeout(context.Background(), window)
	defer cancel()
	var wg sync.WaitGroup
	var n, f atomic.Int64
	var failed atomic.Value
	for _, side := range []struct {
		c     *client.Client
		count *atomic.Int64
	}{{cn, &n}, {cf, &f}} {
		for w := range clients {
			wg.Go(func() {
				for ctx.Err() == nil {
					res, err := side.c.SubmitBroadcast(ctx, &client.BroadcastRequest{Type: "noop", PayloadText: "x",
						VChannels:    vchannels,
						ResourceKeys: []client.ResourceKey{{Domain: "collection", Key: fmt.Sprint("c", w), Mode: "exclusive"}}})
					if ctx.Err() != nil {
						return
					}
					if err != nil {
						failed.Store(err)
						return
					}
					if res.State == "TOMBSTONE" {
						side.count.Add(1)
					}
				}
			})
		}
	}
	wg.Wait()
	if err, _ := failed.Load().(error); err != nil {
		tb.Fatal(err)
	}
	return n.Load(), f.Load()
}

func fmtRates100(xs []float64) []string {
	out := make([]string, len(xs))
	for i, x := range xs {
		out[i] = fmt.Sprintf("%.3f", x)
	}
	return out
}

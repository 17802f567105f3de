package jetstream

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/hostd-dev/hostd/bench/baseline"
	"github.com/hostd-dev/hostd/bench/report"
	"github.com/hostd-dev/hostd/internal/natstest"
	"github.com/hostd-dev/hostd/runtime/wal"
	"github.com/hostd-dev/hostd/runtime/wal/jswal"
)

func seconds() time.Duration {
	if v, err := strconv.ParseFloat(os.Getenv("HOSTD_BENCH_SECONDS"), 64); err == nil && v > 0 {
		return time.Duration(v * float64(time.Second))
	}
	return 2 * time.Second
}

func queueCounts(t *testing.T) []int {
	s := os.Getenv("HOSTD_JSWAL_QUEUES")
	if s == "" {
		return []int{10}
	}
	var out []int
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n <= 0 {
			t.Fatalf("HOSTD_JSWAL_QUEUES: bad count %q", f)
		}
		out = append(out, n)
	}
	return out
}

var payload = make([]byte, 128)

// heap returns the process's heap in use and goroutine count after a GC
// (the nats-server runs in this process).
func heap() (uint64, int) {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapInuse, runtime.NumGoroutine()
}

func TestReport(t *testing.T) {
	if os.Getenv("HOSTD_BENCH") != "1" {
		t.Skip("set HOSTD_BENCH=1 to measure")
	}
	d := seconds()
	var rows []report.Row
	for _, n := range queueCounts(t) {
		rows = append(rows, measure(t, n, d)...)
	}
	if err := report.Emit(t.Logf, rows...); err != nil {
		t.Fatal(err)
	}
}

func measure(t *testing.T, n int, d time.Duration) []report.Row {
	ctx := context.Background()
	c := natstest.Start(t, natstest.Options{SyncAlways: true})
	nc := c.Conn(t)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	l, err := jswal.Open(ctx, jswal.Options{Conn: nc, StreamPrefix: "B", RequestTimeout: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	workers := min(n, 16)
	queues := make([]string, n)
	for i := range queues {
		queues[i] = fmt.Sprintf("bench/%d", i)
	}

	// Stream-per-queue: create.
	h0, g0 := heap()
	start := time.Now()
	for _, q := range queues {
		if err := l.Create(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	create := time.Since(start)
	h1, g1 := heap()
	perStreamKiB := float64(int64(h1)-int64(h0)) / float64(n) / 1024
	perStreamG := float64(g1-g0) / float64(n)

	// Which streams a worker's i-th op goes to: worker w owns queues w,
	// w+workers, w+2·workers, …
	next := make([]int, workers)
	pick := func(w int) int {
		k := next[w]
		next[w]++
		owned := (n - w + workers - 1) / workers
		return w + workers*(k%owned)
	}
	bySubject := streamSubjects(t, js, "B")
	subjects := make([]string, n)
	for i, q := range queues {
		s, ok := bySubject[q]
		if !ok {
			t.Fatalf("no stream for %q", q)
		}
		subjects[i] = s
	}

	// Warm up: one append to every queue (a writer's first append to a
	// queue reads its tail first), timed on its own.
	recs := []wal.Record{{Payload: payload}}
	start = time.Now()
	var wg sync.WaitGroup
	warmErr := make(chan error, workers)
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for q := w; q < n; q += workers {
				if _, err := l.Append(ctx, queues[q], recs); err != nil {
					warmErr <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	warm := time.Since(start)
	close(warmErr)
	for err := range warmErr {
		t.Fatal(err)
	}

	app, err := baseline.Run("jswal append", workers, d, func(w int) error {
		_, err := l.Append(ctx, queues[pick(w)], recs)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	// Raw publishes after jswal's appends: jswal reads a queue's tail once
	// and refuses a message that is not hostd's.
	for i := range next {
		next[i] = 0
	}
	raw, err := baseline.Run("raw publish", workers, d, func(w int) error {
		_, err := js.Publish(ctx, subjects[pick(w)], payload)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	// Stream-per-broker: one stream, a subject per queue, OCC per subject.
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "BROKER", Subjects: []string{"broker.>"}, Storage: jetstream.FileStorage}); err != nil {
		t.Fatal(err)
	}
	last := make([]uint64, n)
	for i := range next {
		next[i] = 0
	}
	broker, err := baseline.Run("stream-per-broker publish", workers, d, func(w int) error {
		q := pick(w)
		ack, err := js.Publish(ctx, "broker."+strconv.Itoa(q), payload, jetstream.WithExpectLastSequencePerSubject(last[q]))
		if err != nil {
			return err
		}
		last[q] = ack.Sequence
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	rawBroker, err := baseline.Run("raw publish, one stream", workers, d, func(w int) error {
		_, err := js.Publish(ctx, "broker."+strconv.Itoa(pick(w)), payload)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}

	fig := func(s string) string { return fmt.Sprintf("%s, %d queues, %d writers", s, n, workers) }
	return []report.Row{
		{Bench: "jetstream", Figure: fmt.Sprintf("stream-per-queue: create %d queues (R1 file)", n),
			Value: float64(create.Microseconds()) / 1000 / float64(n), Unit: "ms/queue",
			Note: fmt.Sprintf("total %s; server heap +%.0f KiB and +%.1f goroutines per stream", create.Round(time.Millisecond), perStreamKiB, perStreamG)},
		{Bench: "jetstream", Figure: fig("stream-per-queue: a writer's first Append to each queue"), Value: float64(warm.Microseconds()) / 1000 / float64(n) * float64(workers), Unit: "ms/append",
			Note: fmt.Sprintf("reads the tail first; %d queues in %s", n, warm.Round(time.Millisecond))},
		{Bench: "jetstream", Figure: fig("stream-per-queue: jswal Append of 1 record (warm tails)"), Value: app.Rate(), Unit: "appends/s",
			Baseline: "raw js.Publish to the same streams", BaseVal: raw.Rate(),
			Note: fmt.Sprintf("p50 %s p99 %s (raw p50 %s p99 %s)", app.P50, app.P99, raw.P50, raw.P99)},
		{Bench: "jetstream", Figure: fig("stream-per-broker: raw publish with expected subject sequence"), Value: broker.Rate(), Unit: "publishes/s",
			Baseline: "raw js.Publish to the same stream", BaseVal: rawBroker.Rate(),
			Note: fmt.Sprintf("p50 %s p99 %s; no hostd implementation (needs an offset index)", broker.P50, broker.P99)},
	}
}

// streamSubjects returns each queue's stream subject (found by the
// streams' metadata, so the bench does not depend on jswal's naming).
func streamSubjects(t *testing.T, js jetstream.JetStream, prefix string) map[string]string {
	t.Helper()
	out := map[string]string{}
	lister := js.ListStreams(context.Background())
	for info := range lister.Info() {
		if qn := info.Config.Metadata["hostd_queue"]; qn != "" && strings.HasPrefix(info.Config.Name, prefix+"_") {
			out[qn] = info.Config.Subjects[0]
		}
	}
	if err := lister.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

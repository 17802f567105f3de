package broadcast

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime/pprof"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/dgraph-io/badger/v4"

	"github.com/hostd-dev/hostd/builtin/broadcast"
	"github.com/hostd-dev/hostd/client"
	"github.com/hostd-dev/hostd/host"
	"github.com/hostd-dev/hostd/host/config"
	"github.com/hostd-dev/hostd/internal/wasmtest"
	"github.com/hostd-dev/hostd/runtime/catalog"
)

var vchannels = []string{"bench/0", "bench/1", "bench/2", "bench/3"}

func duration() time.Duration {
	if s := os.Getenv("HOSTD_BENCH_SECONDS"); s != "" {
		if n, err := strconv.ParseFloat(s, 64); err == nil && n > 0 {
			return time.Duration(n * float64(time.Second))
		}
	}
	return time.Second
}

type result struct {
	name     string
	clients  int
	n        int
	elapsed  time.Duration
	p50, p99 time.Duration
	cpu      time.Duration // process CPU time during the run
}

func (r result) rate() float64 { return float64(r.n) / r.elapsed.Seconds() }

func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// run calls op from clients goroutines for d and measures it.
func run(t *testing.T, name string, clients int, d time.Duration, op func(worker int) error) result {
	t.Helper()
	var mu sync.Mutex
	var lat []time.Duration
	var failed atomic.Value
	stop := time.Now().Add(d)
	cpu0 := cpuTime()
	start := time.Now()
	var wg sync.WaitGroup
	for w := 0; w < clients; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			var mine []time.Duration
			for time.Now().Before(stop) {
				t0 := time.Now()
				if err := op(w); err != nil {
					failed.Store(err)
					return
				}
				mine = append(mine, time.Since(t0))
			}
			mu.Lock()
			lat = append(lat, mine...)
			mu.Unlock()
		}(w)
	}
	wg.Wait()
	el := time.Since(start)
	cpu := cpuTime() - cpu0
	if err, _ := failed.Load().(error); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	if len(lat) == 0 {
		t.Fatalf("%s: nothing completed", name)
	}
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	return result{name: name, clients: clients, n: len(lat), elapsed: el,
		p50: lat[len(lat)/2], p99: lat[len(lat)*99/100], cpu: cpu}
}

// rawFsync writes 4 KiB and fdatasyncs, in the data directory's filesystem.
func rawFsync(t *testing.T, dir string, d time.Duration) result {
	f, err := os.Create(filepath.Join(dir, "fsync.bin"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	buf := make([]byte, 4096)
	return run(t, "raw fsync (4 KiB write + fdatasync)", 1, d, func(int) error {
		if _, err := f.WriteAt(buf, 0); err != nil {
			return err
		}
		return syscall.Fdatasync(int(f.Fd()))
	})
}

// rawBadger is single-key sync writes to Badger, one client.
func rawBadger(t *testing.T, dir string, d time.Duration) result {
	opts := badger.DefaultOptions(filepath.Join(dir, "badger")).WithSyncWrites(true).WithLogger(nil)
	db, err := badger.Open(opts)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var i atomic.Int64
	return run(t, "raw Badger single-key sync write", 1, d, func(int) error {
		k := []byte(fmt.Sprint("k", i.Add(1)))
		return db.Update(func(txn *badger.Txn) error { return txn.Set(k, []byte("v")) })
	})
}

// minimalHTTP is a net/http JSON handler (decode a small object, encode
// a reply) called by the same HTTP client the benchmark uses.
func minimalHTTP(t *testing.T, clients int, d time.Duration) result {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var in map[string]any
		if err := json.NewDecoder(r.Body).Decode(&in); err != nil {
			http.Error(w, err.Error(), 400)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(map[string]any{"id": 1, "state": "TOMBSTONE"})
	})}
	go srv.Serve(ln)
	defer srv.Close()
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 1024}}
	body := []byte(`{"type":"Trivial","vchannels":["bench/0","bench/1","bench/2","bench/3"]}`)
	url := "http://" + ln.Addr().String() + "/"
	return run(t, "minimal net/http JSON handler", clients, d, func(int) error {
		resp, err := hc.Post(url, "application/json", bytes.NewReader(body))
		if err != nil {
			return err
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return nil
	})
}

func startHost(t *testing.T, dir string) *host.Host {
	plugin, err := wasmtest.BuildErr("testdata/trivial")
	if err != nil {
		t.Fatal(err)
	}
	cfg := config.Default()
	cfg.API.Listen = "127.0.0.1:0"
	cfg.Data.Dir = filepath.Join(dir, "hostd")
	cfg.Broadcast.Vchannels = vchannels
	cfg.Telemetry.Traces.Exporter = "none"
	cfg.Plugins.List = []config.Plugin{{Name: "trivial", Path: plugin}}
	h, err := host.Open(context.Background(), &cfg, host.Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	if err := h.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Shutdown(context.Background()) })
	return h
}

// profileRow writes a CPU profile of one row when HOSTD_BENCH_PROFILE names
// it ("inproc256", "http64", …) to HOSTD_BENCH_PROFILE_OUT (default
// /tmp/hostd-<row>.prof), so a missed target can be explained row by row.
func profileRow(t *testing.T, row string) func() {
	if os.Getenv("HOSTD_BENCH_PROFILE") != row {
		return func() {}
	}
	out := os.Getenv("HOSTD_BENCH_PROFILE_OUT")
	if out == "" {
		out = filepath.Join(os.TempDir(), "hostd-"+row+".prof")
	}
	f, err := os.Create(out)
	if err != nil {
		t.Fatal(err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		t.Fatal(err)
	}
	return func() {
		pprof.StopCPUProfile()
		f.Close()
		t.Logf("CPU profile of %s: %s", row, out)
	}
}

// TestReport measures everything in one run and prints one table.
func TestReport(t *testing.T) {
	d := duration()
	dir := t.TempDir()
	var rows []result
	fs := rawFsync(t, dir, d)
	bg := rawBadger(t, dir, d)
	rows = append(rows, fs, bg)

	h := startHost(t, dir)
	e := h.Broadcast()
	ctx := context.Background()
	submit := func(int) error {
		r, err := e.Submit(ctx, &broadcast.Request{Message: broadcast.Message{Type: "Trivial"}, VChannels: vchannels})
		if err == nil && r.State != broadcast.StateTombstone {
			err = fmt.Errorf("state %s: %s", r.State, r.Error)
		}
		return err
	}
	inproc := map[int]result{}
	st, _ := h.Catalog().(interface{ Stats() catalog.Stats })
	var roundsPer []string
	for _, c := range []int{1, 16, 256} {
		var s0 catalog.Stats
		if st != nil {
			s0 = st.Stats()
		}
		stopProf := profileRow(t, fmt.Sprintf("inproc%d", c))
		r := run(t, "in-process Submit", c, d, submit)
		stopProf()
		if st != nil {
			s1 := st.Stats()
			roundsPer = append(roundsPer, fmt.Sprintf("%d clients: %.2f catalog commit rounds (fsyncs) and %.1f commits per broadcast",
				c, float64(s1.Rounds-s0.Rounds)/float64(r.n), float64(s1.Writers-s0.Writers)/float64(r.n)))
		}
		inproc[c] = r
		rows = append(rows, r)
	}
	cl, err := client.New(h.URL(), client.WithHTTPClient(&http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 1024}}))
	if err != nil {
		t.Fatal(err)
	}
	req := &client.BroadcastRequest{Type: "Trivial", VChannels: vchannels}
	httpRes := map[int]result{}
	for _, c := range []int{1, 16, 64, 256} {
		stopProf := profileRow(t, fmt.Sprintf("http%d", c))
		r := run(t, "HTTP POST /v1/broadcasts", c, d, func(int) error {
			res, err := cl.SubmitBroadcast(ctx, req)
			if err == nil && res.State != "TOMBSTONE" {
				err = fmt.Errorf("state %s", res.State)
			}
			return err
		})
		stopProf()
		httpRes[c] = r
		rows = append(rows, r)
	}
	mh := minimalHTTP(t, 64, d)
	rows = append(rows, mh)

	fsRate := fs.rate()
	var b bytes.Buffer
	fmt.Fprintf(&b, "\n%-40s %7s %10s %10s %10s %12s %10s\n", "row", "clients", "ops/s", "p50", "p99", "CPU/op", "÷fsync/s")
	for _, r := range rows {
		fmt.Fprintf(&b, "%-40s %7d %10.0f %10s %10s %12s %10.2f\n", r.name, r.clients, r.rate(),
			r.p50.Round(time.Microsecond), r.p99.Round(time.Microsecond), (r.cpu / time.Duration(r.n)).Round(time.Microsecond), r.rate()/fsRate)
	}
	fmt.Fprintf(&b, "\nin-process: %s\n", strings.Join(roundsPer, "; "))
	fmt.Fprintf(&b, "targets: in-process@256 %.2f broadcasts per raw fsync (target ≥ 5); HTTP@64 %.2f× minimal handler (target ≥ 0.3); "+
		"p50@1 client %.2f raw fsync latencies (target ≤ 3)\n%s",
		inproc[256].rate()/fsRate, httpRes[64].rate()/mh.rate(), float64(inproc[1].p50)/float64(fs.p50),
		fmt.Sprintf("tasks: %v", h.Broadcast().Counts()))
	t.Log(b.String())
}

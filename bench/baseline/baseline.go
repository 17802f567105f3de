package baseline

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	badger "github.com/dgraph-io/badger/v4"
)

// Result is one measurement.
type Result struct {
	Name     string
	Workers  int
	Ops      int           // operations completed
	Elapsed  time.Duration // wall time
	CPU      time.Duration // process CPU time (user+system) during the run
	P50, P99 time.Duration // latency percentiles of single operations
	Max      time.Duration
}

// Rate is operations per second.
func (r Result) Rate() float64 {
	if r.Elapsed <= 0 {
		return 0
	}
	return float64(r.Ops) / r.Elapsed.Seconds()
}

// CPUPerOp is the process CPU time per operation.
func (r Result) CPUPerOp() time.Duration {
	if r.Ops == 0 {
		return 0
	}
	return r.CPU / time.Duration(r.Ops)
}

func (r Result) String() string {
	return fmt.Sprintf("%s c=%d: %.0f ops/s, p50 %v, p99 %v, cpu/op %v (%d ops in %v)",
		r.Name, r.Workers, r.Rate(), r.P50, r.P99, r.CPUPerOp(), r.Ops, r.Elapsed.Round(time.Millisecond))
}

// CPUTime returns the process's user+system CPU time so far.
func CPUTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// Percentile returns the p-th percentile (0..100) of d (sorted in place),
// by the nearest-rank method; 0 for an empty slice.
func Percentile(d []time.Duration, p float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	if !sort.SliceIsSorted(d, func(i, j int) bool { return d[i] < d[j] }) {
		sort.Slice(d, func(i, j int) bool { return d[i] < d[j] })
	}
	if p <= 0 {
		return d[0]
	}
	if p >= 100 {
		return d[len(d)-1]
	}
	rank := int(p/100*float64(len(d))+0.999999999) - 1
	if rank < 0 {
		rank = 0
	}
	return d[rank]
}

// Run calls op from workers goroutines until d has passed (each worker
// finishes its current op) and measures it. The first error stops every
// worker and is returned.
func Run(name string, workers int, d time.Duration, op func(worker int) error) (Result, error) {
	if workers < 1 {
		return Result{}, errors.New("baseline: workers must be >= 1")
	}
	var (
		mu     sync.Mutex
		lats   []time.Duration
		failed atomic.Pointer[error]
		wg     sync.WaitGroup
	)
	deadline := time.Now().Add(d)
	cpu0 := CPUTime()
	start := time.Now()
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			mine := make([]time.Duration, 0, 1024)
			for failed.Load() == nil && time.Now().Before(deadline) {
				t0 := time.Now()
				if err := op(w); err != nil {
					failed.CompareAndSwap(nil, &err)
					break
				}
				mine = append(mine, time.Since(t0))
			}
			mu.Lock()
			lats = append(lats, mine...)
			mu.Unlock()
		}(w)
	}
	wg.Wait()
	r := Result{Name: name, Workers: workers, Ops: len(lats), Elapsed: time.Since(start), CPU: CPUTime() - cpu0}
	r.P50 = Percentile(lats, 50)
	r.P99 = Percentile(lats, 99)
	r.Max = Percentile(lats, 100)
	if e := failed.Load(); e != nil {
		return r, fmt.Errorf("baseline: %s: %w", name, *e)
	}
	return r, nil
}

// Fsync measures write+fdatasync of a record of size bytes, appended to one
// file per worker in a fresh temporary directory under dir, for d.
func Fsync(dir string, workers, size int, d time.Duration) (Result, error) {
	tmp, err := os.MkdirTemp(dir, "fsync-baseline-")
	if err != nil {
		return Result{}, err
	}
	defer os.RemoveAll(tmp)
	files := make([]*os.File, workers)
	for i := range files {
		f, err := os.OpenFile(filepath.Join(tmp, fmt.Sprintf("w%d", i)), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
		if err != nil {
			return Result{}, err
		}
		defer f.Close()
		files[i] = f
	}
	rec := bytes.Repeat([]byte{'x'}, size)
	return Run("raw fsync", workers, d, func(w int) error {
		if _, err := files[w].Write(rec); err != nil {
			return err
		}
		return syscall.Fdatasync(int(files[w].Fd()))
	})
}

// BadgerSync measures raw Badger: each op is one transaction setting one
// key (size-byte value, distinct key per worker) with SyncWrites on, in a
// fresh database under dir, from workers goroutines for d.
func BadgerSync(dir string, workers, size int, d time.Duration) (Result, error) {
	b, err := NewBadger(dir)
	if err != nil {
		return Result{}, err
	}
	defer b.Close()
	return b.Run(workers, size, d)
}

// Badger is an open raw Badger baseline database (SyncWrites on), for
// benchmarks that interleave several measurement slices with their own.
type Badger struct {
	dir string
	db  *badger.DB
	seq atomic.Uint64
}

// NewBadger opens a fresh raw Badger database in a temporary directory
// under dir.
func NewBadger(dir string) (*Badger, error) {
	tmp, err := os.MkdirTemp(dir, "badger-baseline-")
	if err != nil {
		return nil, err
	}
	db, err := badger.Open(badger.DefaultOptions(tmp).WithSyncWrites(true).WithLogger(nil).
		WithMemTableSize(32 << 20).WithBlockCacheSize(32 << 20))
	if err != nil {
		os.RemoveAll(tmp)
		return nil, err
	}
	return &Badger{dir: tmp, db: db}, nil
}

// Run measures single-key sync transactions from workers goroutines for d.
func (b *Badger) Run(workers, size int, d time.Duration) (Result, error) {
	val := bytes.Repeat([]byte{'v'}, size)
	return Run("raw badger sync txn", workers, d, func(w int) error {
		key := fmt.Appendf(nil, "k/%d/%d", w, b.seq.Add(1)%1024)
		return b.db.Update(func(txn *badger.Txn) error { return txn.Set(key, val) })
	})
}

// Write commits keys keys of bytes bytes in total (values of equal size,
// keys distinct from every earlier Write) in as few sync transactions as
// Badger allows — a new transaction when one is full — and returns the
// wall time and the number of transactions: the floor of writing that much
// durable state in one go.
func (b *Badger) Write(keys int, bytes int64) (time.Duration, int, error) {
	if keys < 1 {
		return 0, 0, errors.New("baseline: Write needs at least one key")
	}
	val := make([]byte, max(bytes/int64(keys)-16, 1))
	start := time.Now()
	txns := 1
	txn := b.db.NewTransaction(true)
	defer func() { txn.Discard() }()
	for i := 0; i < keys; i++ {
		key := fmt.Appendf(nil, "w/%016d", b.seq.Add(1))
		err := txn.Set(key, val)
		if errors.Is(err, badger.ErrTxnTooBig) {
			if err := txn.Commit(); err != nil {
				return 0, txns, err
			}
			txn, txns = b.db.NewTransaction(true), txns+1
			err = txn.Set(key, val)
		}
		if err != nil {
			return 0, txns, err
		}
	}
	if err := txn.Commit(); err != nil {
		return 0, txns, err
	}
	return time.Since(start), txns, nil
}

// Close closes and removes the database.
func (b *Badger) Close() error {
	err := b.db.Close()
	os.RemoveAll(b.dir)
	return err
}

// Best returns the result with the highest rate (best-of-N slices damp the
// noise of a shared machine).
func Best(rs ...Result) Result {
	var best Result
	for _, r := range rs {
		if r.Rate() > best.Rate() {
			best = r
		}
	}
	return best
}

// LoadAvg returns the 1-minute load average ("" if unknown), to explain
// noisy figures.
func LoadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return ""
	}
	f := bytes.Fields(b)
	if len(f) == 0 {
		return ""
	}
	return string(f[0])
}

// HTTPJSON measures a minimal net/http handler that decodes a small JSON
// body and encodes a small JSON reply, over loopback keep-alive
// connections from workers concurrent clients, for d.
func HTTPJSON(workers int, d time.Duration) (Result, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return Result{}, err
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/echo", func(w http.ResponseWriter, r *http.Request) {
		var in struct {
			Key   string `json:"key"`
			Value string `json:"value"`
		}
		if err := json.NewDecoder(io.LimitReader(r.Body, 1<<20)).Decode(&in); err != nil {
			http.Error(w, `{"error":{"code":"invalid"}}`, http.StatusBadRequest)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(map[string]any{"key": in.Key, "ok": true})
	})
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go srv.Serve(ln)
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		srv.Shutdown(ctx)
	}()
	tr := &http.Transport{MaxIdleConnsPerHost: workers, MaxConnsPerHost: workers}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr, Timeout: 10 * time.Second}
	url := "http://" + ln.Addr().String() + "/v1/echo"
	body := []byte(`{"key":"bench/0","value":"hello"}`)
	return Run("minimal net/http JSON handler", workers, d, func(int) error {
		resp, err := client.Post(url, "application/json", bytes.NewReader(body))
		if err != nil {
			return err
		}
		_, err = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("status %d", resp.StatusCode)
		}
		return err
	})
}

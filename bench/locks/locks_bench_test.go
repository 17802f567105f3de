package locks

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hostd-dev/hostd/client"
	"github.com/hostd-dev/hostd/host"
	"github.com/hostd-dev/hostd/host/config"
)

var (
	resMu   sync.Mutex
	results = map[string]float64{} // name -> pairs/s of the last (largest) run
)

func record(b *testing.B, name string) {
	rate := float64(b.N) / b.Elapsed().Seconds()
	b.ReportMetric(rate, "pairs/s")
	b.ReportMetric(0, "ns/op")
	resMu.Lock()
	results[name] = rate
	resMu.Unlock()
}

// parallel runs fn on clients goroutines (each with its own index) until
// b.N pairs are done.
func parallel(b *testing.B, clients int, fn func(worker int, i int64) error) {
	var next atomic.Int64
	var wg sync.WaitGroup
	var failed atomic.Value
	b.ResetTimer()
	for w := 0; w < clients; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := next.Add(1)
				if i > int64(b.N) {
					return
				}
				if err := fn(w, i); err != nil {
					failed.Store(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	b.StopTimer()
	if err, _ := failed.Load().(error); err != nil {
		b.Fatal(err)
	}
}

func httpClient() *http.Client {
	return &http.Client{Transport: &http.Transport{MaxIdleConns: 256, MaxIdleConnsPerHost: 256}}
}

// ---- hostd ----

func startHostd(b *testing.B) string {
	cfg := config.Default()
	cfg.API.Listen = "127.0.0.1:0"
	cfg.Data.Dir = b.TempDir()
	h, err := host.Open(context.Background(), &cfg, host.Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		b.Fatal(err)
	}
	if err := h.Start(context.Background()); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = h.Shutdown(context.Background()) })
	return h.URL()
}

func benchHostd(b *testing.B, url string, clients int) {
	c, err := client.New(url, client.WithHTTPClient(httpClient()))
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	parallel(b, clients, func(w int, _ int64) error {
		g, err := c.AcquireLock(ctx, client.AcquireLock{Owner: "bench", TTL: "30s",
			Keys: []client.LockKey{{Domain: "bench", Key: fmt.Sprint("k", w)}}})
		if err != nil {
			return err
		}
		return c.ReleaseLock(ctx, g.ID, g.Token)
	})
}

// ---- minimal net/http JSON handler ----

func startMinimal(b *testing.B) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var in map[string]any
		if err := json.NewDecoder(r.Body).Decode(&in); err != nil {
			http.Error(w, err.Error(), 400)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{"id": "1", "token": "t", "fence": 1})
	})}
	go func() { _ = srv.Serve(ln) }()
	b.Cleanup(func() { _ = srv.Close() })
	return "http://" + ln.Addr().String()
}

func benchMinimal(b *testing.B, url string, clients int) {
	c, err := client.New(url, client.WithHTTPClient(httpClient()))
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	parallel(b, clients, func(w int, _ int64) error {
		var out map[string]any
		if err := c.Do(ctx, "POST", "/v1/locks", client.AcquireLock{Owner: "bench", TTL: "30s",
			Keys: []client.LockKey{{Domain: "bench", Key: fmt.Sprint("k", w)}}}, &out); err != nil {
			return err
		}
		return c.Do(ctx, "POST", "/v1/locks/1/release", map[string]string{"token": "t"}, &out)
	})
}

// ---- redis ----

var unlockScript = redis.NewScript(`if redis.call("GET", KEYS[1]) == ARGV[1] then return redis.call("DEL", KEYS[1]) else return 0 end`)

func startRedis(b *testing.B, fsync bool) *redis.Client {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		b.Skip("redis-server is not installed (apt-get install -y redis-server); skipping the Redis baseline")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	dir := b.TempDir()
	args := []string{"--port", fmt.Sprint(port), "--bind", "127.0.0.1", "--dir", dir, "--save", "", "--daemonize", "no", "--protected-mode", "yes"}
	if fsync {
		args = append(args, "--appendonly", "yes", "--appendfsync", "always")
	} else {
		args = append(args, "--appendonly", "no")
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = io.Discard, io.Discard
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	rc := redis.NewClient(&redis.Options{Addr: fmt.Sprintf("127.0.0.1:%d", port), PoolSize: 128})
	b.Cleanup(func() { _ = rc.Close() })
	deadline := time.Now().Add(10 * time.Second)
	for rc.Ping(context.Background()).Err() != nil {
		if time.Now().After(deadline) {
			b.Fatal("redis-server did not answer PING")
		}
		time.Sleep(20 * time.Millisecond)
	}
	return rc
}

func benchRedis(b *testing.B, rc *redis.Client, clients int) {
	ctx := context.Background()
	parallel(b, clients, func(w int, i int64) error {
		key, tok := fmt.Sprint("bench:k", w), fmt.Sprint("t", i)
		ok, err := rc.SetNX(ctx, key, tok, 30*time.Second).Result()
		if err != nil {
			return err
		}
		if !ok {
			return fmt.Errorf("SET NX failed on uncontended key %s", key)
		}
		n, err := unlockScript.Run(ctx, rc, []string{key}, tok).Int()
		if err != nil {
			return err
		}
		if n != 1 {
			return fmt.Errorf("compare-and-delete deleted %d", n)
		}
		return nil
	})
}

// ---- raw fsync ----

func benchFsync(b *testing.B) {
	f, err := os.Create(filepath.Join(b.TempDir(), "fsync"))
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	buf := make([]byte, 128)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := f.WriteAt(buf, int64(i%1024)*128); err != nil {
			b.Fatal(err)
		}
		if err := f.Sync(); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
}

// BenchmarkLockPairs measures acquire+release pairs per second (see
// doc.go) and prints the table with ratios.
func BenchmarkLockPairs(b *testing.B) {
	hostdURL := startHostd(b)
	minimalURL := startMinimal(b)
	b.Run("fsync", func(b *testing.B) { benchFsync(b); record(b, "fsync") })
	for _, clients := range []int{1, 64} {
		sfx := fmt.Sprintf("/c=%d", clients)
		b.Run("hostd"+sfx, func(b *testing.B) { benchHostd(b, hostdURL, clients); record(b, "hostd"+sfx) })
		b.Run("minimal"+sfx, func(b *testing.B) { benchMinimal(b, minimalURL, clients); record(b, "minimal"+sfx) })
		b.Run("redis-nopersist"+sfx, func(b *testing.B) {
			rc := startRedis(b, false)
			benchRedis(b, rc, clients)
			record(b, "redis-nopersist"+sfx)
		})
		b.Run("redis-fsync"+sfx, func(b *testing.B) {
			rc := startRedis(b, true)
			benchRedis(b, rc, clients)
			record(b, "redis-fsync"+sfx)
		})
	}
	resMu.Lock()
	defer resMu.Unlock()
	names := make([]string, 0, len(results))
	for n := range results {
		names = append(names, n)
	}
	sort.Strings(names)
	var sb strings.Builder
	fmt.Fprintf(&sb, "\n%-22s %12s %10s %10s %10s\n", "run", "pairs/s", "/minimal", "/redis-np", "/redis-fs")
	for _, n := range names {
		r := results[n]
		c := n[strings.LastIndex(n, "/")+1:]
		ratio := func(base string) string {
			if v := results[base+"/"+c]; v > 0 && strings.Contains(n, "/") {
				return fmt.Sprintf("%.2f", r/v)
			}
			return "-"
		}
		fmt.Fprintf(&sb, "%-22s %12.0f %10s %10s %10s\n", n, r, ratio("minimal"), ratio("redis-nopersist"), ratio("redis-fsync"))
	}
	if f := results["fsync"]; f > 0 {
		fmt.Fprintf(&sb, "hostd/c=1 pairs per raw fsync: %.2f; hostd/c=64 pairs per raw fsync: %.2f\n", results["hostd/c=1"]/f, results["hostd/c=64"]/f)
	}
	b.Log(sb.String())
}

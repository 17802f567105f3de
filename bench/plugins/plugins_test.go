package pluginbench

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/pprof"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hostd-dev/hostd/internal/wasmtest"
	"github.com/hostd-dev/hostd/runtime/catalog"
	"github.com/hostd-dev/hostd/runtime/wasm"
	"github.com/hostd-dev/hostd/sdk/abi"
)

var sizes = []struct {
	name string
	n    int
}{{"0B", 0}, {"256B", 256}, {"64KiB", 64 << 10}}

// nativeAck is the baseline: a Go function doing the same work and
// producing the same 12-byte result.
//
//go:noinline
func nativeAck(payload []byte) []byte {
	count, sum := Parse(payload)
	out := make([]byte, 12)
	binary.LittleEndian.PutUint32(out, count)
	binary.LittleEndian.PutUint64(out[4:], sum)
	return out
}

// newRuntime loads the ackbench plugin with one warm instance and a real
// Badger catalog in a temp dir.
func newRuntime(tb testing.TB) *wasm.Runtime {
	tb.Helper()
	path, err := wasmtest.BuildErr("testdata/ackbench")
	if err != nil {
		tb.Fatal(err)
	}
	direct, err := wasmtest.BuildErr("testdata/abidirect")
	if err != nil {
		tb.Fatal(err)
	}
	store, err := catalog.Open(catalog.DefaultOptions(filepath.Join(tb.TempDir(), "catalog")))
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { store.Close() })
	rt, err := wasm.New(context.Background(), wasm.Config{
		Plugins:  []wasm.Spec{{Name: "ackbench", Path: path}, {Name: "abidirect", Path: direct}},
		CacheDir: wasmtest.CacheDir(),
		Store:    store,
		Defaults: wasm.Limits{PoolSize: 1},
		Logger:   slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { rt.Close() })
	return rt
}

func callHostd(rt *wasm.Runtime, msg *abi.Message) ([]byte, error) {
	res, err := rt.Ack(context.Background(), msg)
	if err != nil {
		return nil, err
	}
	if len(res.Ops) != 1 || len(res.Ops[0].Value) != 12 {
		return nil, fmt.Errorf("ack staged %d ops", len(res.Ops))
	}
	return res.Ops[0].Value, nil
}

func TestHostdMatchesNative(t *testing.T) {
	rt := newRuntime(t)
	for _, s := range sizes {
		p := Payload(s.n)
		got, err := callHostd(rt, &abi.Message{ID: 1, Type: "BenchAck", Payload: p, Attempt: 1})
		if err != nil {
			t.Fatal(err)
		}
		if want := nativeAck(p); !bytes.Equal(got, want) {
			t.Fatalf("%s: hostd %x != native %x", s.name, got, want)
		}
	}
}

func benchNative(p []byte) func(*testing.B) {
	return func(b *testing.B) {
		b.SetBytes(int64(len(p)))
		for i := 0; i < b.N; i++ {
			nativeAck(p)
		}
	}
}

func benchHostd(rt *wasm.Runtime, p []byte) func(*testing.B) {
	msg := &abi.Message{ID: 1, Type: "BenchAck", Payload: p, Attempt: 1}
	return func(b *testing.B) {
		b.SetBytes(int64(len(p)))
		b.ReportAllocs()
		for i := 0; i < b.N; i++ {
			if _, err := callHostd(rt, msg); err != nil {
				b.Fatal(err)
			}
		}
	}
}

func benchHostdParse(rt *wasm.Runtime, p []byte) func(*testing.B) {
	return benchHostdType(rt, "BenchParse", p)
}

// benchHostdType calls the ack callback of typ and ignores its result.
func benchHostdType(rt *wasm.Runtime, typ string, p []byte) func(*testing.B) {
	msg := &abi.Message{ID: 1, Type: typ, Payload: p, Attempt: 1}
	return func(b *testing.B) {
		b.SetBytes(int64(len(p)))
		b.ReportAllocs()
		for i := 0; i < b.N; i++ {
			if _, err := rt.Ack(context.Background(), msg); err != nil {
				b.Fatal(err)
			}
		}
	}
}

func BenchmarkAck(b *testing.B) {
	rt := newRuntime(b)
	for _, s := range sizes {
		p := Payload(s.n)
		b.Run("native/"+s.name, benchNative(p))
		b.Run("hostd/"+s.name, benchHostd(rt, p))
		b.Run("hostd-no-kv/"+s.name, benchHostdParse(rt, p))
		b.Run("hostd-abi-direct/"+s.name, benchHostdType(rt, "BenchDirect", p))
		b.Run("hostd-empty/"+s.name, benchHostdType(rt, "BenchEmpty", p))
		b.Run("hostd-lazy-decode/"+s.name, benchHostdType(rt, "BenchLazy", p))
	}
}

// row is one line of the table; bench/extism prints the same JSON.
type row struct {
	Variant  string  `json:"variant"`
	Size     string  `json:"size"`
	NsPerOp  float64 `json:"ns_per_op"`        // CPU time per call
	WallNs   float64 `json:"wall_ns_per_op"`   // wall time per call
	NativeNs float64 `json:"native_ns_per_op"` // CPU time of the native baseline, same process
}

// rounds is how many times each row is measured; the table keeps the
// round with the least CPU time per call. CPU time (getrusage: user+system,
// all threads of this process) is what a call costs; wall time on a shared
// machine also counts waiting for a CPU, so it is printed but not compared.
const rounds = 3

// cpuNow returns this process's user+system CPU time.
func cpuNow() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// measure runs f as a benchmark rounds times and returns the best CPU and
// wall time per op.
func measure(f func(*testing.B)) (cpuNs, wallNs float64) {
	for i := 0; i < rounds; i++ {
		var cpu float64
		r := testing.Benchmark(func(b *testing.B) {
			c0 := cpuNow()
			f(b)
			cpu = float64(cpuNow()-c0) / float64(b.N)
		})
		wall := float64(r.T.Nanoseconds()) / float64(r.N)
		if i == 0 || cpu < cpuNs {
			cpuNs = cpu
		}
		if i == 0 || wall < wallNs {
			wallNs = wall
		}
	}
	return cpuNs, wallNs
}

// TestPluginCallTable measures native, hostd and (in a subprocess of the
// bench/extism module) Extism calls and prints one table. HOSTD_BENCH=1
// enables it; HOSTD_BENCH_PROFILE=file writes a CPU profile of the hostd
// 256-byte rows.
func TestPluginCallTable(t *testing.T) {
	if os.Getenv("HOSTD_BENCH") != "1" {
		t.Skip("set HOSTD_BENCH=1 to measure (takes ~1 min)")
	}
	rt := newRuntime(t)
	plain, closing := newRaw(t, false), newRaw(t, true)
	var rows []row
	for _, s := range sizes {
		p := Payload(s.n)
		native, nativeWall := measure(benchNative(p))
		add := func(variant string, f func(*testing.B)) {
			cpu, wall := measure(f)
			rows = append(rows, row{variant, s.name, cpu, wall, native})
		}
		rows = append(rows, row{"native", s.name, native, nativeWall, native})
		var stop func()
		if f := os.Getenv("HOSTD_BENCH_PROFILE"); f != "" && s.n == 256 {
			w, err := os.Create(f)
			if err != nil {
				t.Fatal(err)
			}
			if err := pprof.StartCPUProfile(w); err != nil {
				t.Fatal(err)
			}
			stop = func() { pprof.StopCPUProfile(); w.Close() }
		}
		add("hostd", benchHostd(rt, p))
		if stop != nil {
			stop()
		}
		add("hostd-no-kv", benchHostdParse(rt, p))
		add("hostd-empty-handler", benchHostdType(rt, "BenchEmpty", p))
		add("hostd-lazy-decode", benchHostdType(rt, "BenchLazy", p))
		add("wazero-raw", benchRaw(plain, p))
		add("wazero-raw+close-on-ctx-done", benchRaw(closing, p))
	}

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", "test", "-count=1", "-run", "TestExtismTable", "-v", ".")
	cmd.Dir = filepath.Join("..", "extism")
	cmd.Env = append(os.Environ(), "HOSTD_BENCH=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("extism run: %v\n%s", err, out)
	}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		if line, ok := strings.CutPrefix(sc.Text(), "BENCH "); ok {
			var r row
			if err := json.Unmarshal([]byte(line), &r); err != nil {
				t.Fatalf("extism row %q: %v", line, err)
			}
			rows = append(rows, r)
		}
	}

	byKey := map[string]row{}
	for _, r := range rows {
		byKey[r.Variant+"/"+r.Size] = r
	}
	var b strings.Builder
	fmt.Fprintf(&b, "\n| variant | payload | CPU ns/call | wall ns/call | × native (CPU, same process) | extism ÷ hostd (CPU) |\n|---|---|---:|---:|---:|---:|\n")
	for _, s := range sizes {
		h := byKey["hostd/"+s.name]
		for _, v := range []string{"native", "hostd", "hostd-no-kv", "hostd-empty-handler", "hostd-lazy-decode", "wazero-raw", "wazero-raw+close-on-ctx-done", "extism", "extism+close-on-ctx-done"} {
			r, ok := byKey[v+"/"+s.name]
			if !ok {
				t.Fatalf("missing row %s/%s", v, s.name)
			}
			vs := "—"
			if strings.HasPrefix(v, "extism") {
				vs = fmt.Sprintf("%.1f×", r.NsPerOp/h.NsPerOp)
			}
			fmt.Fprintf(&b, "| %s | %s | %.0f | %.0f | %.1f× | %s |\n", v, s.name, r.NsPerOp, r.WallNs, r.NsPerOp/r.NativeNs, vs)
		}
	}
	t.Log(b.String())
	h, e := byKey["hostd/256B"], byKey["extism/256B"]
	if e.NsPerOp/h.NsPerOp < 5 {
		t.Logf("TARGET MISSED: hostd's 256-byte call is %.1f× cheaper than Extism's (target ≥ 5×)", e.NsPerOp/h.NsPerOp)
	} else {
		t.Logf("target met: hostd's 256-byte call is %.1f× cheaper than Extism's (target ≥ 5×)", e.NsPerOp/h.NsPerOp)
	}
}

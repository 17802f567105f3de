package extismbench

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	extism "github.com/extism/go-sdk"
	"github.com/tetratelabs/wazero"
)

var sizes = []struct {
	name string
	n    int
}{{"0B", 0}, {"256B", 256}, {"64KiB", 64 << 10}}

var (
	guestOnce sync.Once
	guestWasm []byte
	guestErr  error
)

// buildGuest compiles testdata/guest for wasip1 once per test binary, into
// the Go build cache's neighbourhood (a temp dir) — go build reuses its cache.
func buildGuest(tb testing.TB) []byte {
	tb.Helper()
	guestOnce.Do(func() {
		dir, err := os.MkdirTemp("", "extism-guest-")
		if err != nil {
			guestErr = err
			return
		}
		defer os.RemoveAll(dir)
		out := filepath.Join(dir, "guest.wasm")
		cmd := exec.Command("go", "build", "-buildmode=c-shared", "-o", out, "./testdata/guest")
		cmd.Env = append(os.Environ(), "GOOS=wasip1", "GOARCH=wasm")
		if b, err := cmd.CombinedOutput(); err != nil {
			guestErr = fmt.Errorf("build guest: %v\n%s", err, b)
			return
		}
		guestWasm, guestErr = os.ReadFile(out)
	})
	if guestErr != nil {
		tb.Fatal(guestErr)
	}
	return guestWasm
}

// newPlugin compiles the guest with Extism and returns one warm instance.
// closeOnDone mirrors hostd's mandatory WithCloseOnContextDone(true).
func newPlugin(tb testing.TB, closeOnDone bool) *extism.Plugin {
	tb.Helper()
	ctx := context.Background()
	rc := wazero.NewRuntimeConfig().WithCloseOnContextDone(closeOnDone)
	cp, err := extism.NewCompiledPlugin(ctx, extism.Manifest{
		Wasm: []extism.Wasm{extism.WasmData{Data: buildGuest(tb)}},
	}, extism.PluginConfig{EnableWasi: true, RuntimeConfig: rc}, nil)
	if err != nil {
		tb.Fatal(err)
	}
	p, err := cp.Instance(ctx, extism.PluginInstanceConfig{})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { p.Close(ctx); cp.Close(ctx) })
	return p
}

func callExtism(p *extism.Plugin, payload []byte) (uint32, uint64, error) {
	rc, out, err := p.Call("ack", payload)
	if err != nil {
		return 0, 0, err
	}
	if rc != 0 || len(out) != 12 {
		return 0, 0, fmt.Errorf("ack: rc=%d, %d output bytes", rc, len(out))
	}
	return binary.LittleEndian.Uint32(out), binary.LittleEndian.Uint64(out[4:]), nil
}

// nativeAck is the baseline: a plain Go function doing the same work and
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

// TestExtismMatchesNative checks the Extism guest computes what Parse does,
// so the benchmark compares equal work.
func TestExtismMatchesNative(t *testing.T) {
	p := newPlugin(t, true)
	for _, s := range sizes {
		payload := Payload(s.n)
		if len(payload) != s.n {
			t.Fatalf("payload %s: %d bytes", s.name, len(payload))
		}
		wc, ws := Parse(payload)
		if wc == 0 && s.n > 0 {
			t.Fatalf("payload %s parses to no records", s.name)
		}
		for i := 0; i < 3; i++ {
			c, sum, err := callExtism(p, payload)
			if err != nil {
				t.Fatal(err)
			}
			if c != wc || sum != ws {
				t.Fatalf("%s: extism (%d,%x) != native (%d,%x)", s.name, c, sum, wc, ws)
			}
		}
	}
}

func benchNative(payload []byte) func(*testing.B) {
	return func(b *testing.B) {
		b.SetBytes(int64(len(payload)))
		for i := 0; i < b.N; i++ {
			nativeAck(payload)
		}
	}
}

func benchExtism(p *extism.Plugin, payload []byte) func(*testing.B) {
	return func(b *testing.B) {
		b.SetBytes(int64(len(payload)))
		for i := 0; i < b.N; i++ {
			if _, _, err := callExtism(p, payload); err != nil {
				b.Fatal(err)
			}
		}
	}
}

func BenchmarkAck(b *testing.B) {
	p := newPlugin(b, true)
	for _, s := range sizes {
		payload := Payload(s.n)
		b.Run("native/"+s.name, benchNative(payload))
		b.Run("extism/"+s.name, benchExtism(p, payload))
	}
}

// Result is one line of the table, printed as "BENCH {json}" by
// TestExtismTable for bench/plugins to merge.
type Result struct {
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

// TestExtismTable measures native and Extism calls in this process and
// prints them as BENCH lines. It runs only with HOSTD_BENCH=1 (it takes a
// few seconds per row).
func TestExtismTable(t *testing.T) {
	if os.Getenv("HOSTD_BENCH") != "1" {
		t.Skip("set HOSTD_BENCH=1 to measure")
	}
	variants := []struct {
		name        string
		closeOnDone bool
	}{{"extism", false}, {"extism+close-on-ctx-done", true}}
	for _, s := range sizes {
		payload := Payload(s.n)
		native, _ := measure(benchNative(payload))
		for _, v := range variants {
			p := newPlugin(t, v.closeOnDone)
			cpu, wall := measure(benchExtism(p, payload))
			line, _ := json.Marshal(Result{Variant: v.name, Size: s.name, NsPerOp: cpu, WallNs: wall, NativeNs: native})
			fmt.Printf("BENCH %s\n", line)
		}
	}
}

package wasm

import (
	"bytes"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hostd-dev/hostd/sdk/abi"
)

// BenchmarkAck measures one ack-callback call through the runtime (encode,
// pool, context with timeout, span, guest decode + handler, result) against
// a native Go function doing the same encode/decode/handler work.
// The bench/ module has the cross-runtime comparison (Extism).
func BenchmarkAck(b *testing.B) {
	store := openStore(b)
	r := mustRuntime(b, Config{Plugins: []Spec{{Name: "echo", Path: echoWasm(b)}}, Store: store, Defaults: Limits{PoolSize: 1}})
	// A callback that writes one KV key, committed as the broadcast engine
	// does: the cost of staging, quota accounting and the commit.
	b.Run("wasm-kvput/commit", func(b *testing.B) {
		b.ReportAllocs()
		cpu := startCPU()
		m := msg("Echo", "put a=1")
		for b.Loop() {
			res, err := r.Ack(bg, m)
			if err != nil {
				b.Fatal(err)
			}
			if err := commit(bg, store, res); err != nil {
				b.Fatal(err)
			}
		}
		cpu.report(b)
	})
	for _, size := range []int{256, 64 << 10} {
		m := msg("Echo", "ok "+strings.Repeat("x", size-3))
		name := map[int]string{256: "256B", 64 << 10: "64KiB"}[size]
		b.Run("wasm/"+name, func(b *testing.B) {
			b.ReportAllocs()
			cpu := startCPU()
			for b.Loop() {
				if _, err := r.Ack(bg, m); err != nil {
					b.Fatal(err)
				}
			}
			cpu.report(b)
		})
		b.Run("native/"+name, func(b *testing.B) {
			b.ReportAllocs()
			cpu := startCPU()
			defer cpu.report(b)
			var buf []byte
			for b.Loop() {
				buf = abi.AppendMessage(buf[:0], m)
				dm, err := abi.DecodeMessage(buf)
				if err != nil {
					b.Fatal(err)
				}
				if cmd, _, _ := bytes.Cut(dm.Payload, []byte(" ")); string(cmd) != "ok" {
					b.Fatal("bad")
				}
			}
		})
	}
}

// cpuMeter reports the process's CPU time (user+system) per operation:
// on a shared, overloaded machine it is steadier than wall time.
type cpuMeter struct{ start time.Duration }

func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func startCPU() cpuMeter { return cpuMeter{cpuTime()} }

func (c cpuMeter) report(b *testing.B) {
	b.ReportMetric(float64(cpuTime()-c.start)/float64(b.N), "cpu-ns/op")
}

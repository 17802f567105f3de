package wasm

import (
	"bytes"
	"strings"
	"testing"

	"github.com/hostd-dev/hostd/sdk/abi"
)

// BenchmarkAck measures one ack-callback call through the runtime (encode,
// pool, context with timeout, span, guest decode + handler, result) against
// a native Go function doing the same encode/decode/handler work.
// The bench/ module has the cross-runtime comparison (Extism).
func BenchmarkAck(b *testing.B) {
	r := mustRuntime(b, Config{Plugins: []Spec{{Name: "echo", Path: echoWasm(b)}}, Defaults: Limits{PoolSize: 1}})
	for _, size := range []int{256, 64 << 10} {
		m := msg("Echo", "ok "+strings.Repeat("x", size-3))
		name := map[int]string{256: "256B", 64 << 10: "64KiB"}[size]
		b.Run("wasm/"+name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := r.Ack(bg, m); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run("native/"+name, func(b *testing.B) {
			b.ReportAllocs()
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

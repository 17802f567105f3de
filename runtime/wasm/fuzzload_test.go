package wasm

import (
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/hostd-dev/hostd/sdk/abi"
)

// FuzzLoadAndCall feeds modules — real plugins, the attack modules of
// issue 12, and mutations of both — through a load and one call of the
// first handler the module registers, while a probe goroutine measures how
// long the process stops answering and a garbage collection runs.
// Properties: nothing panics; the probe is never delayed more than 2 s;
// neither the call nor the GC that ran during it take more than 2 s past
// the call timeout (no guest holds up the scheduler or a GC); and the heap
// stays within the plugin's memory budget plus a fixed allowance. Seeds are built at test time (nothing is
// committed): real plugins come from wasmtest, mutations from flipping and
// truncating them.
func FuzzLoadAndCall(f *testing.F) {
	a := wasmAsm{}
	seeds := [][]byte{rawModule(), bulkSpinnerOf(128, 8<<20), recursionModule(), counterWriter.build(), loopLocalWriter.build(),
		initLoopModule(), startLoopModule(), featureModule(true),
		modSpec{tables: [][]byte{{0x70, 0x00, 0x01}}, spin: a.cat(tableGrow(16<<20, true), tableGrow(16<<20, true))}.build()}
	if !testing.Short() {
		echo, err := os.ReadFile(echoWasm(f))
		if err != nil {
			f.Fatal(err)
		}
		seeds = append(seeds, echo, echo[:len(echo)*2/3])
		for _, at := range []int{len(echo) / 3, len(echo) / 2} {
			m := append([]byte(nil), echo...)
			m[at] ^= 0x5a
			seeds = append(seeds, m)
		}
	}
	for _, s := range seeds {
		f.Add(s)
	}
	const memoryLimit, callTimeout = 8 << 20, time.Second
	f.Fuzz(func(t *testing.T, bin []byte) {
		path := filepath.Join(t.TempDir(), "fuzz.wasm")
		if err := os.WriteFile(path, bin, 0o644); err != nil {
			t.Fatal(err)
		}
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		p := startProbe()
		r, _ := newRuntime(t, Config{Plugins: []Spec{{Name: "fuzz", Path: path, Limits: Limits{
			MemoryLimit: memoryLimit, CallTimeout: callTimeout, InitTimeout: 5 * time.Second, PoolSize: 1}}}})
		if r == nil {
			t.Fatal("no runtime")
		}
		var call, gc time.Duration
		if in := r.List(); len(in) == 1 && len(in[0].Registrations) > 0 {
			start := time.Now()
			done := make(chan struct{})
			go func() {
				defer close(done)
				reg := in[0].Registrations[0]
				m := msg(reg.Name, "ok")
				switch reg.Kind {
				case abi.KindAck.String():
					_, _ = r.Ack(bg, m)
				case abi.KindValidator.String():
					_ = r.Validate(bg, m, nil)
				case abi.KindResourceKeys.String():
					_, _ = r.ResourceKeys(bg, m)
				case abi.KindPolicy.String():
					_, _ = r.Policy(bg, reg.Name, &abi.PolicyInput{Operation: "create", Topic: "t", Queues: 2,
						Brokers: []abi.Broker{{Name: "b1"}, {Name: "b2"}}})
				}
			}()
			runtime.GC() // while the guest runs
			gc = time.Since(start)
			<-done
			call = time.Since(start)
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		worst := p.end()
		r.Close()
		if worst > 2*time.Second {
			t.Fatalf("the process stopped answering for %v", worst)
		}
		if call > callTimeout+2*time.Second || gc > callTimeout+2*time.Second {
			t.Fatalf("call took %v, a GC during it %v, with a %v call timeout", call, gc, callTimeout)
		}
		// Linear memory and tables are bounded by the limits; compiled
		// module metadata and instance state take the rest.
		if grew := int64(after.HeapAlloc) - int64(before.HeapAlloc); grew > memoryLimit+memoryLimit/4+96<<20 {
			t.Fatalf("heap grew by %d MiB", grew>>20)
		}
	})
}

package wasm

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"

	"github.com/hostd-dev/hostd/internal/wasmtest"
	"github.com/hostd-dev/hostd/sdk/abi"
)

// wasm assembles small modules for tests (see also rawModule).
type wasmAsm struct{}

func (wasmAsm) uleb(v uint32) []byte { return appendU32(nil, v) }
func (wasmAsm) sleb(v int32) []byte {
	var b []byte
	for {
		c := byte(v & 0x7f)
		v >>= 7
		if (v == 0 && c&0x40 == 0) || (v == -1 && c&0x40 != 0) {
			return append(b, c)
		}
		b = append(b, c|0x80)
	}
}
func (wasmAsm) cat(parts ...[]byte) []byte { return bytes.Join(parts, nil) }
func (a wasmAsm) vec(items ...[]byte) []byte {
	return a.cat(a.uleb(uint32(len(items))), a.cat(items...))
}
func (a wasmAsm) str(s string) []byte { return a.cat(a.uleb(uint32(len(s))), []byte(s)) }
func (a wasmAsm) section(id byte, body []byte) []byte {
	return a.cat([]byte{id}, a.uleb(uint32(len(body))), body)
}
func (a wasmAsm) functype(params, results []byte) []byte {
	return a.cat([]byte{0x60}, a.vec(split(params)...), a.vec(split(results)...))
}
func (a wasmAsm) i32(v int32) []byte { return a.cat([]byte{0x41}, a.sleb(v)) }

// body makes a function body with the given locals (one group per type
// byte) and code, adding the final end.
func (a wasmAsm) body(locals []byte, code ...[]byte) []byte {
	var groups [][]byte
	for _, l := range locals {
		groups = append(groups, []byte{0x01, l})
	}
	b := a.cat(a.vec(groups...), a.cat(code...), []byte{0x0b})
	return a.cat(a.uleb(uint32(len(b))), b)
}

func split(b []byte) [][]byte {
	out := make([][]byte, len(b))
	for i := range b {
		out[i] = b[i : i+1]
	}
	return out
}

const (
	tI32  = 0x7f
	tF32  = 0x7d
	empty = 0x40
)

// abiModule is an ABI v1 plugin without Go: ack callbacks "Spin" (runs
// spin, which must not return) and "Quick" (runs quick, which returns),
// with extra functions appended after handle.
func abiModule(spin, quick []byte, extraTypes [][]byte, extraFuncs []uint32, extraBodies [][]byte) []byte {
	return modSpec{spin: spin, quick: quick, extraTypes: extraTypes, extraFuncs: extraFuncs, extraBodies: extraBodies}.build()
}

// modSpec describes an abiModule with more parts. Function indices: 0
// register (imported), 1 _initialize, 2 marker, 3 alloc, 4 handle (params
// 0 id, 1 ptr, 2 len), then the extra functions.
type modSpec struct {
	spin, quick []byte
	extraTypes  [][]byte
	extraFuncs  []uint32
	extraBodies [][]byte
	memPages    uint32   // default 1
	tables      [][]byte // table section entries (reftype, limits)
	globals     [][]byte // global section entries
	start       *uint32  // start function index
	initCode    []byte   // run by _initialize before registering
}

func (m modSpec) build() []byte {
	a := wasmAsm{}
	types := append([][]byte{
		a.functype([]byte{tI32, tI32, tI32, tI32}, []byte{tI32}), // 0 register
		a.functype(nil, nil),                               // 1 _initialize, marker
		a.functype([]byte{tI32}, []byte{tI32}),             // 2 alloc
		a.functype([]byte{tI32, tI32, tI32}, []byte{tI32}), // 3 handle
	}, m.extraTypes...)
	funcs := [][]byte{a.uleb(1), a.uleb(1), a.uleb(2), a.uleb(3)} // 1..4
	for _, t := range m.extraFuncs {
		funcs = append(funcs, a.uleb(t))
	}
	bodies := append([][]byte{
		a.body(nil, m.initCode, // _initialize
			a.i32(int32(abi.KindAck)), a.i32(0), a.i32(4), a.i32(0), []byte{0x10, 0x00, 0x1a},
			a.i32(int32(abi.KindAck)), a.i32(4), a.i32(5), a.i32(1), []byte{0x10, 0x00, 0x1a}),
		a.body(nil),              // hostd_abi_v1
		a.body(nil, a.i32(1024)), // hostd_alloc
		a.body(nil, // hostd_handle(id, ptr, len): id 0 spins, 1 is quick
			[]byte{0x20, 0x00, 0x45, 0x04, empty}, m.spin, []byte{0x05}, m.quick, []byte{0x0b},
			a.i32(int32(abi.CodeOK))),
	}, m.extraBodies...)
	pages := m.memPages
	if pages == 0 {
		pages = 1
	}
	secs := [][]byte{
		a.section(1, a.vec(types...)),
		a.section(2, a.vec(a.cat(a.str(abi.ImportModule), a.str(abi.FnRegister), []byte{0x00}, a.uleb(0)))),
		a.section(3, a.vec(funcs...)),
	}
	if m.tables != nil {
		secs = append(secs, a.section(4, a.vec(m.tables...)))
	}
	secs = append(secs, a.section(5, a.vec(a.cat([]byte{0x00}, a.uleb(pages)))))
	if m.globals != nil {
		secs = append(secs, a.section(6, a.vec(m.globals...)))
	}
	secs = append(secs, a.section(7, a.vec(
		a.cat(a.str(abi.ExportMemory), []byte{0x02}, a.uleb(0)),
		a.cat(a.str(abi.ExportInitialize), []byte{0x00}, a.uleb(1)),
		a.cat(a.str(abi.ExportABIMarker), []byte{0x00}, a.uleb(2)),
		a.cat(a.str(abi.ExportAlloc), []byte{0x00}, a.uleb(3)),
		a.cat(a.str(abi.ExportHandle), []byte{0x00}, a.uleb(4)),
	)))
	if m.start != nil {
		secs = append(secs, a.section(8, a.uleb(*m.start)))
	}
	secs = append(secs,
		a.section(10, a.vec(bodies...)),
		a.section(11, a.vec(a.cat([]byte{0x00}, a.i32(0), []byte{0x0b}, a.str("SpinQuick")))),
	)
	return a.cat([]byte("\x00asm\x01\x00\x00\x00"), a.cat(secs...))
}

// recursionModule: "Spin" calls rec(60), a doubly recursive function
// without any loop (2^60 calls).
func recursionModule() []byte {
	a := wasmAsm{}
	rec := a.body(nil,
		[]byte{0x20, 0x00, 0x45, 0x04, tI32}, a.i32(1), // if n == 0: 1
		[]byte{0x05, 0x20, 0x00}, a.i32(1), []byte{0x6b, 0x10, 0x05}, // rec(n-1)
		[]byte{0x20, 0x00}, a.i32(1), []byte{0x6b, 0x10, 0x05}, // rec(n-1)
		[]byte{0x6a, 0x0b}) // add, end if
	return abiModule(a.cat(a.i32(60), []byte{0x10, 0x05, 0x1a}), a.cat(a.i32(3), []byte{0x10, 0x05, 0x1a}),
		nil, []uint32{2}, [][]byte{rec})
}

// simdModule: "Spin" loops forever; "Quick" uses a SIMD instruction,
// which the rewriter does not know.
func simdModule() []byte {
	a := wasmAsm{}
	spin := []byte{0x03, empty, 0x0c, 0x00, 0x0b} // loop br 0 end
	quick := a.cat([]byte{0xfd, 0x0c}, make([]byte, 16), []byte{0x1a})
	return abiModule(spin, quick, nil, nil, nil)
}

// featureModule exercises the instructions Go guests use and the ones the
// rewriter must skip correctly: a counting loop, a loop with a multi-value
// block type, saturating truncation, sign extension, bulk memory,
// br_table, typed select, f64/i64 constants and memory access. Exports:
// count(n) loops n times and returns n; mv() returns 0; misc() returns 7.
func featureModule(withMemory bool) []byte {
	a := wasmAsm{}
	count := a.body([]byte{tI32},
		[]byte{0x03, empty},                                    // loop
		[]byte{0x20, 0x01}, a.i32(1), []byte{0x6a, 0x22, 0x01}, // i++ (tee)
		[]byte{0x20, 0x00, 0x49, 0x0d, 0x00}, // br_if i < n
		[]byte{0x0b, 0x20, 0x01})
	mv := a.body([]byte{tI32},
		a.i32(3), []byte{0x03, 0x01}, // loop (type 1): (i32) -> (i32)
		a.i32(1), []byte{0x6b, 0x22, 0x00, 0x20, 0x00, 0x0d, 0x00, 0x0b})
	misc := []byte{
		0x43, 0x00, 0x00, 0xc0, 0x3f, 0xfc, 0x00, 0xc0, 0x1a, // f32.const 1.5; i32.trunc_sat_f32_s; i32.extend8_s; drop
		0x44, 0, 0, 0, 0, 0, 0, 0xf8, 0x3f, 0x1a, // f64.const 1.5; drop
		0x42, 0x80, 0x80, 0x80, 0x80, 0x10, 0xc4, 0x1a, // i64.const 2^32; i64.extend32_s; drop
		0x02, empty, 0x02, empty, 0x41, 0x01, 0x0e, 0x01, 0x00, 0x01, 0x0b, 0x0b, // block block br_table [0] 1 end end
		0x41, 0x01, 0x41, 0x02, 0x41, 0x00, 0x1c, 0x01, tI32, 0x1a, // select (result i32)
	}
	if withMemory {
		misc = append(misc,
			0x41, 0x00, 0x41, 0x07, 0x41, 0x04, 0xfc, 0x0b, 0x00, // memory.fill(0, 7, 4)
			0x41, 0x08, 0x41, 0x00, 0x41, 0x04, 0xfc, 0x0a, 0x00, 0x00, // memory.copy(8, 0, 4)
			0x41, 0x08, 0x2d, 0x00, 0x00, 0x1a, // i32.load8_u offset 0 align 0; drop
			0x3f, 0x00, 0x1a, // memory.size; drop
		)
	}
	misc = append(misc, 0x41, 0x07)
	sections := [][]byte{
		a.section(1, a.vec(a.functype([]byte{tI32}, []byte{tI32}), a.functype([]byte{tI32}, []byte{tI32}), a.functype(nil, []byte{tI32}))),
		a.section(3, a.vec(a.uleb(0), a.uleb(2), a.uleb(2))),
	}
	if withMemory {
		sections = append(sections, a.section(5, a.vec([]byte{0x00, 0x01})))
	}
	sections = append(sections,
		a.section(7, a.vec(
			a.cat(a.str("count"), []byte{0x00}, a.uleb(0)),
			a.cat(a.str("mv"), []byte{0x00}, a.uleb(1)),
			a.cat(a.str("misc"), []byte{0x00}, a.uleb(2)),
		)),
		a.section(10, a.vec(count, mv, a.body(nil, misc))),
		a.section(0, a.str(".debug_info")),
		a.section(0, a.cat(a.str("other"), []byte{1, 2, 3})),
	)
	return a.cat([]byte("\x00asm\x01\x00\x00\x00"), a.cat(sections...))
}

func instantiate(t *testing.T, bin []byte) api.Module {
	t.Helper()
	ctx := context.Background()
	r := wazero.NewRuntime(ctx)
	t.Cleanup(func() { r.Close(ctx) })
	mod, err := r.Instantiate(ctx, bin)
	if err != nil {
		t.Fatal(err)
	}
	return mod
}

func call(t *testing.T, mod api.Module, fn string, args ...uint64) (uint64, error) {
	t.Helper()
	res, err := mod.ExportedFunction(fn).Call(context.Background(), args...)
	if err != nil {
		return 0, err
	}
	return res[0], nil
}

// The rewritten module computes the same results; the counter makes it
// exit to Go and start again at budget, a stop makes it trap.
func TestInstrumentedModuleBehaves(t *testing.T) {
	orig := featureModule(true)
	ins, err := instrument(orig)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(ins.bin, []byte(".debug_info")) || !bytes.Contains(ins.bin, []byte("other")) {
		t.Fatal("custom sections: .debug_* must be dropped, others kept")
	}
	before, after := instantiate(t, orig), instantiate(t, ins.bin)
	for _, c := range []struct {
		fn   string
		args []uint64
	}{{"count", []uint64{3 * budget}}, {"mv", nil}, {"misc", nil}} {
		want, err1 := call(t, before, c.fn, c.args...)
		got, err2 := call(t, after, c.fn, c.args...)
		if err1 != nil || err2 != nil || got != want {
			t.Fatalf("%s: instrumented %d %v, original %d %v", c.fn, got, err2, want, err1)
		}
	}
	counter, ok := after.ExportedGlobal(InterruptExport).(api.MutableGlobal)
	if !ok {
		t.Fatal("no mutable counter exported")
	}
	// count(n) decrements the counter once, at its entry (its loop counts
	// in a local).
	counter.Set(api.EncodeI32(budget))
	if _, err := call(t, after, "count", 10); err != nil || api.DecodeI32(counter.Get()) != budget-1 {
		t.Fatalf("count: %v, counter %d", err, api.DecodeI32(counter.Get()))
	}
	counter.Set(api.EncodeI32(1))
	if _, err := call(t, after, "count", 10); err != nil || api.DecodeI32(counter.Get()) != budget {
		t.Fatalf("count across a budget exit: %v, counter %d", err, api.DecodeI32(counter.Get()))
	}
	counter.Set(api.EncodeI32(stopValue))
	if _, err := call(t, after, "count", 10); err == nil || !strings.Contains(err.Error(), "unreachable") {
		t.Fatalf("stop at entry: %v", err)
	}
	// A stop written while a loop runs ends it within loopEvery
	// iterations.
	counter.Set(api.EncodeI32(budget))
	time.AfterFunc(20*time.Millisecond, func() { counter.Set(api.EncodeI32(stopValue)) })
	start := time.Now()
	if _, err := call(t, after, "count", 1<<31-1); err == nil || !strings.Contains(err.Error(), "unreachable") {
		t.Fatalf("stop in a loop: %v", err)
	}
	t.Logf("loop stopped after %v", time.Since(start))
}

// Every first-party and test plugin is instrumented and still compiles.
func TestInstrumentRealPlugins(t *testing.T) {
	ctx := context.Background()
	cache, err := wazero.NewCompilationCacheWithDir(wasmtest.CacheDir())
	if err != nil {
		t.Fatal(err)
	}
	r := wazero.NewRuntimeWithConfig(ctx, wazero.NewRuntimeConfig().WithCompilationCache(cache))
	defer r.Close(ctx)
	for _, p := range realPlugins(t) {
		bin, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		ins, err := instrument(bin)
		if err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		if _, err := r.CompileModule(ctx, ins.bin); err != nil {
			t.Fatalf("%s: instrumented module does not compile: %v", p, err)
		}
		// A module cannot be instrumented twice: the name is taken.
		if _, err := instrument(ins.bin); !errors.Is(err, errInstrument) || !strings.Contains(err.Error(), InterruptExport) {
			t.Fatalf("%s: second instrumentation: %v", p, err)
		}
	}
}

func realPlugins(t testing.TB) []string {
	var out []string
	for _, dir := range []string{"testdata/echo", "testdata/faults", "testdata/leases",
		filepath.Join(wasmtest.Root(), "plugins", "collections"), filepath.Join(wasmtest.Root(), "plugins", "zone-spread")} {
		out = append(out, wasmtest.Build(t, dir))
	}
	return out
}

// What the rewriter does not handle is an error wrapping errInstrument.
func TestInstrumentRejects(t *testing.T) {
	a := wasmAsm{}
	good := featureModule(true)
	reserved := a.cat(good[:8], a.section(6, a.vec([]byte{tI32, 0x00, 0x41, 0x00, 0x0b})),
		a.section(7, a.vec(a.cat(a.str(InterruptExport), []byte{0x03}, a.uleb(0)))))
	for name, c := range map[string]struct {
		bin  []byte
		want string
	}{
		"empty":     {nil, "not a WebAssembly 1.0 binary"},
		"truncated": {good[:len(good)-3], "truncated"},
		"global":    {modSpec{spin: []byte{0x41, 0x00, 0x24, 0x00}}.build(), "global 0 out of range"},
		"local":     {modSpec{spin: []byte{0x41, 0x00, 0x21, 0x03}}.build(), "local 3 out of range"},
		"reserved":  {reserved, "reserved by hostd"},
		"simd":      {simdModule(), "unsupported opcode 0xfd"},
		"no memory": {featureModule(false), "no memory"},
		"unknown":   {bytes.Replace(recursionModule(), []byte{0x6a, 0x0b}, []byte{0x06, 0x0b}, 1), "unsupported opcode 0x6"},
	} {
		_, err := instrument(c.bin)
		if !errors.Is(err, errInstrument) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want %q", name, err, c.want)
		}
	}
}

// FuzzInstrument: the rewriter never panics, and if the input is a module
// wazero accepts, the output is one too (or the rewriter said no).
func FuzzInstrument(f *testing.F) {
	for _, b := range [][]byte{featureModule(true), featureModule(false), recursionModule(), simdModule(), rawModule()} {
		f.Add(b)
	}
	// Real plugins as seeds (2 MB each: compiling them under -race takes
	// minutes, and the runtime's tests compile their instrumented form).
	if !testing.Short() && !raceEnabled {
		for _, p := range realPlugins(f) {
			b, err := os.ReadFile(p)
			if err != nil {
				f.Fatal(err)
			}
			f.Add(b)
		}
	}
	ctx := context.Background()
	cache, err := wazero.NewCompilationCacheWithDir(wasmtest.CacheDir())
	if err != nil {
		f.Fatal(err)
	}
	r := wazero.NewRuntimeWithConfig(ctx, wazero.NewRuntimeConfig().WithCompilationCache(cache))
	f.Cleanup(func() { r.Close(ctx) })
	f.Fuzz(func(t *testing.T, bin []byte) {
		ins, err := instrument(bin)
		if err != nil {
			if !errors.Is(err, errInstrument) {
				t.Fatalf("error does not wrap errInstrument: %v", err)
			}
			return
		}
		orig, err := compileModule(ctx, r, bin)
		if err != nil {
			return // not a valid module; the rewrite of garbage is garbage
		}
		orig.Close(ctx)
		out, err := compileModule(ctx, r, ins.bin)
		if err != nil {
			t.Fatalf("input compiles, instrumented output does not: %v", err)
		}
		out.Close(ctx)
	})
}

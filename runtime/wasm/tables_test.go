package wasm

import (
	"errors"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"
)

// tableGrow is table.grow(n) of table 0 with a null funcref, then a trap
// unless the result is want (-1: refused, else the old size is >= 0).
func tableGrow(n int32, refused bool) []byte {
	a := wasmAsm{}
	check := []byte{0x41, 0x7f, 0x47} // i32.const -1; i32.ne: trap if it grew
	if !refused {
		check = []byte{0x41, 0x7f, 0x46} // i32.const -1; i32.eq: trap if refused
	}
	return a.cat([]byte{0xd0, 0x70}, a.i32(n), []byte{0xfc, 0x0f, 0x00}, check, []byte{0x04, empty, 0x00, 0x0b})
}

// The attack of issue 12 (escape 4): with memory_limit 1 MiB, a guest
// grows a table by 4M elements, three times. Tables now share a budget of
// memory_limit/4 (32768 8-byte elements here): the grows fail (-1) and
// hostd's heap does not grow; a grow within the budget works.
func TestTablesAreBoundedByTheMemoryLimit(t *testing.T) {
	a := wasmAsm{}
	m := modSpec{
		tables: [][]byte{{0x70, 0x00, 0x01}}, // funcref, min 1, no max
		spin:   tableGrow(1000, false),
		quick:  a.cat(tableGrow(4<<20, true), tableGrow(4<<20, true), tableGrow(4<<20, true)),
	}
	for _, mode := range modes {
		r := mustRuntime(t, Config{Plugins: []Spec{{Name: "tables", Path: writeModule(t, "tables", m.build()),
			Limits: Limits{MemoryLimit: 1 << 20, CallTimeout: time.Minute, PoolSize: 1, Interrupt: mode}}}})
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		for i := 0; i < 3; i++ {
			if _, err := r.Ack(bg, msg("Quick", "")); err != nil {
				t.Fatalf("%s: a grow beyond the budget did not fail: %v", mode, err)
			}
		}
		runtime.ReadMemStats(&after)
		if grew := int64(after.HeapAlloc) - int64(before.HeapAlloc); grew > 16<<20 {
			t.Fatalf("%s: heap grew by %d bytes", mode, grew)
		}
		if _, err := r.Ack(bg, msg("Spin", "")); err != nil {
			t.Fatalf("%s: a grow within the budget failed: %v", mode, err)
		}
	}
}

// A module whose tables need more than the budget at instantiation is
// refused at load; one that imports a table too.
func TestTablesOverBudgetAreRefused(t *testing.T) {
	m := modSpec{tables: [][]byte{{0x70, 0x00, 0xa0, 0x8d, 0x06}}} // min 100000
	_, err := newRuntime(t, Config{Plugins: []Spec{{Name: "big", Path: writeModule(t, "big", m.build()),
		Limits: Limits{MemoryLimit: 1 << 20, PoolSize: 1}}}})
	if !errors.Is(err, ErrInvalidModule) || !strings.Contains(err.Error(), "tables exceed the plugin's memory budget") ||
		!strings.Contains(err.Error(), "32768 elements") {
		t.Fatalf("load: %v", err)
	}
	a := wasmAsm{}
	imported := a.cat([]byte("\x00asm\x01\x00\x00\x00"),
		a.section(2, a.vec(a.cat(a.str("hostd"), a.str("t"), []byte{0x01, 0x70, 0x00, 0x00}))))
	if _, err := boundTables(imported, 100); !errors.Is(err, errTables) || !strings.Contains(err.Error(), "imports table hostd.t") {
		t.Fatalf("imported table: %v", err)
	}
}

// boundTables keeps lower maxima, shares the slack, and the real plugins
// fit the budget of the smallest memory a Go guest can run in.
func TestBoundTables(t *testing.T) {
	a := wasmAsm{}
	mod := func(tables ...[]byte) []byte {
		return a.cat([]byte("\x00asm\x01\x00\x00\x00"), a.section(4, a.vec(tables...)), a.section(0, a.str("tail")))
	}
	got, err := boundTables(mod([]byte{0x70, 0x01, 0x02, 0x05}, []byte{0x6f, 0x00, 0x03}, []byte{0x70, 0x00, 0x00}), 100)
	want := mod([]byte{0x70, 0x01, 0x02, 0x05}, a.cat([]byte{0x6f, 0x01, 0x03}, a.uleb(95)), []byte{0x70, 0x01, 0x00, 0x00})
	if err != nil || string(got) != string(want) {
		t.Fatalf("got % x, %v\nwant % x", got, err, want)
	}
	for _, p := range realPlugins(t) {
		bin, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := boundTables(bin, tableBudget(35*65536)); err != nil {
			t.Fatalf("%s: %v", p, err)
		}
	}
}

package wasm

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/hostd-dev/hostd/sdk/abi"
)

// A plugin written without Go or the SDK, assembled byte by byte from
// docs/plugin-abi.md: it proves the documented ABI is all a plugin in
// another language needs. It registers a resource-key function "Raw" that
// returns a fixed envelope from its data segment, and an ack callback
// "RawTrap" that executes `unreachable`.
func rawModule() []byte { return rawModuleWith(int32(abi.KindAck), 1024) }

// rawModuleWith is rawModule registering "RawTrap" with register's kind
// argument ackKind (the kind, plus role bits), whose hostd_alloc returns
// allocPtr.
func rawModuleWith(ackKind, allocPtr int32) []byte {
	const (
		i32         = 0x7f
		opConst     = 0x41
		opCall      = 0x10
		opDrop      = 0x1a
		opLocalGet  = 0x20
		opIf        = 0x04
		opEnd       = 0x0b
		opUnreach   = 0x00
		blockVoid   = 0x40
		exportFunc  = 0x00
		exportMem   = 0x02
		keysAt      = 16
		namesAt     = 0 // "Raw" at 0, "RawTrap" at 3
		handlerKeys = 0
		handlerTrap = 1
	)
	keys := abi.AppendResourceKeys(nil, []abi.ResourceKey{{Domain: "collection", Key: "raw", Mode: abi.Exclusive}})
	uleb := func(v uint32) []byte {
		var b []byte
		for {
			c := byte(v & 0x7f)
			v >>= 7
			if v != 0 {
				b = append(b, c|0x80)
				continue
			}
			return append(b, c)
		}
	}
	sleb := func(v int32) []byte {
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
	cat := func(parts ...[]byte) []byte {
		var b []byte
		for _, p := range parts {
			b = append(b, p...)
		}
		return b
	}
	str := func(s string) []byte { return cat(uleb(uint32(len(s))), []byte(s)) }
	vec := func(items ...[]byte) []byte { return cat(uleb(uint32(len(items))), cat(items...)) }
	section := func(id byte, body []byte) []byte { return cat([]byte{id}, uleb(uint32(len(body))), body) }
	ft := func(params, results []byte) []byte {
		return cat([]byte{0x60}, uleb(uint32(len(params))), params, uleb(uint32(len(results))), results)
	}
	i32c := func(v int32) []byte { return cat([]byte{opConst}, sleb(v)) }
	body := func(code ...[]byte) []byte {
		b := cat(vec(), cat(code...), []byte{opEnd}) // no locals
		return cat(uleb(uint32(len(b))), b)
	}
	types := section(1, vec(
		ft([]byte{i32, i32, i32, i32}, []byte{i32}), // 0 register
		ft([]byte{i32, i32}, nil),                   // 1 set_output
		ft(nil, nil),                                // 2 _initialize, marker
		ft([]byte{i32}, []byte{i32}),                // 3 alloc
		ft([]byte{i32, i32, i32}, []byte{i32}),      // 4 handle
	))
	imports := section(2, vec(
		cat(str(abi.ImportModule), str(abi.FnRegister), []byte{0x00}, uleb(0)),  // func 0
		cat(str(abi.ImportModule), str(abi.FnSetOutput), []byte{0x00}, uleb(1)), // func 1
	))
	funcs := section(3, vec(uleb(2), uleb(2), uleb(3), uleb(4))) // funcs 2..5
	memory := section(5, vec([]byte{0x00, 0x01}))                // 1 page
	exports := section(7, vec(
		cat(str(abi.ExportMemory), []byte{exportMem}, uleb(0)),
		cat(str(abi.ExportInitialize), []byte{exportFunc}, uleb(2)),
		cat(str(abi.ExportABIMarker), []byte{exportFunc}, uleb(3)),
		cat(str(abi.ExportAlloc), []byte{exportFunc}, uleb(4)),
		cat(str(abi.ExportHandle), []byte{exportFunc}, uleb(5)),
	))
	code := section(10, vec(
		body( // _initialize: register both handlers
			i32c(int32(abi.KindResourceKeys)), i32c(namesAt), i32c(3), i32c(handlerKeys), []byte{opCall}, uleb(0), []byte{opDrop},
			i32c(ackKind), i32c(namesAt+3), i32c(7), i32c(handlerTrap), []byte{opCall}, uleb(0), []byte{opDrop},
		),
		body(),               // hostd_abi_v1
		body(i32c(allocPtr)), // hostd_alloc: a fixed buffer (at 1024)
		body( // hostd_handle(id, ptr, len)
			[]byte{opLocalGet}, uleb(0), []byte{opIf, blockVoid, opUnreach, opEnd}, // id 1 traps
			i32c(keysAt), i32c(int32(len(keys))), []byte{opCall}, uleb(1), // set_output(keys)
			i32c(int32(abi.CodeOK)),
		),
	))
	data := section(11, vec(
		cat([]byte{0x00}, i32c(namesAt), []byte{opEnd}, str("RawRawTrap")),
		cat([]byte{0x00}, i32c(keysAt), []byte{opEnd}, uleb(uint32(len(keys))), keys),
	))
	return cat([]byte("\x00asm\x01\x00\x00\x00"), types, imports, funcs, memory, exports, code, data)
}

func TestPluginWithoutTheSDK(t *testing.T) {
	path := filepath.Join(t.TempDir(), "raw.wasm")
	if err := os.WriteFile(path, rawModule(), 0o644); err != nil {
		t.Fatal(err)
	}
	r := mustRuntime(t, Config{Plugins: []Spec{{Name: "raw", Path: path, Limits: Limits{MemoryLimit: 1 << 20}}}, Defaults: Limits{PoolSize: 1}})
	want := []abi.ResourceKey{{Domain: "collection", Key: "raw", Mode: abi.Exclusive}}
	for i := 0; i < 3; i++ {
		keys, err := r.ResourceKeys(bg, msg("Raw", `{"any":"thing"}`))
		if err != nil || !cmp.Equal(keys, want) {
			t.Fatalf("keys = %v, %v", keys, err)
		}
		_, err = r.Ack(bg, msg("RawTrap", ""))
		if KindOf(err) != KindTrap || !strings.Contains(err.Error(), "unreachable") || !strings.Contains(err.Error(), "plugin raw") {
			t.Fatalf("trap: %v", err)
		}
	}
	if h, ok := r.Lookup("Raw"); !ok || !h.ResourceKeys || h.Ack {
		t.Fatalf("Lookup = %+v", h)
	}
}

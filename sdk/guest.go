//go:build wasip1

package sdk

import (
	"fmt"
	"time"
	"unsafe"

	"github.com/hostd-dev/hostd/sdk/abi"
)

// This file is the Wasm (wasip1) side of ABI v1: host imports and guest
// exports. docs/plugin-abi.md is the byte-level description.

//go:wasmimport hostd register
func importRegister(kind int32, namePtr unsafe.Pointer, nameLen uint32, id int32) int32

//go:wasmimport hostd log
func importLog(level int32, ptr unsafe.Pointer, n uint32)

//go:wasmimport hostd take
func importTake(ptr unsafe.Pointer, capacity uint32) int32

//go:wasmimport hostd set_output
func importSetOutput(ptr unsafe.Pointer, n uint32)

//go:wasmimport hostd set_error
func importSetError(ptr unsafe.Pointer, n uint32)

//go:wasmimport hostd kv_get
func importKVGet(keyPtr unsafe.Pointer, keyLen uint32) int64

//go:wasmimport hostd kv_put
func importKVPut(keyPtr unsafe.Pointer, keyLen uint32, valPtr unsafe.Pointer, valLen uint32) int64

//go:wasmimport hostd kv_delete
func importKVDelete(keyPtr unsafe.Pointer, keyLen uint32) int64

//go:wasmimport hostd kv_scan
func importKVScan(prefixPtr unsafe.Pointer, prefixLen uint32, afterPtr unsafe.Pointer, afterLen uint32, limit int32) int64

//go:wasmimport hostd config_get
func importConfigGet(keyPtr unsafe.Pointer, keyLen uint32) int64

//go:wasmimport hostd span_event
func importSpanEvent(namePtr unsafe.Pointer, nameLen uint32, attrsPtr unsafe.Pointer, attrsLen uint32)

//go:wasmimport hostd span_attrs
func importSpanAttrs(attrsPtr unsafe.Pointer, attrsLen uint32)

//go:wasmimport hostd now
func importNow() int64

func strPtr(s string) unsafe.Pointer { return unsafe.Pointer(unsafe.StringData(s)) }

func bytesPtr(b []byte) unsafe.Pointer {
	if len(b) == 0 {
		return nil
	}
	return unsafe.Pointer(&b[0])
}

// take reads the n pending result bytes of the last host call. Nothing to
// read needs no host call: pending bytes not taken are replaced by the
// next host call (docs/plugin-abi.md).
func take(n int64) []byte {
	if n <= 0 {
		return nil
	}
	buf := make([]byte, n)
	importTake(bytesPtr(buf), uint32(n))
	return buf
}

// result turns an i64 host-call result into (pending bytes, error).
func result(r int64) ([]byte, error) {
	if r >= 0 {
		return take(r), nil
	}
	msg := make([]byte, abi.MaxErrorLen)
	n := importTake(bytesPtr(msg), uint32(len(msg)))
	if int(n) < len(msg) {
		msg = msg[:n]
	}
	return nil, &HostError{Status: abi.Status(-r), Message: string(msg)}
}

func hostRegister(kind int32, name string, id int32) {
	importRegister(kind, strPtr(name), uint32(len(name)), id)
}

func hostKVGet(key string) ([]byte, bool, error) {
	if err := checkKey(key); err != nil {
		return nil, false, err
	}
	r := importKVGet(strPtr(key), uint32(len(key)))
	if r == -int64(abi.StatusNotFound) {
		take(0)
		return nil, false, nil
	}
	v, err := result(r)
	if err != nil {
		return nil, false, err
	}
	if v == nil {
		v = []byte{}
	}
	return v, true, nil
}

func hostKVPut(key string, value []byte) error {
	_, err := result(importKVPut(strPtr(key), uint32(len(key)), bytesPtr(value), uint32(len(value))))
	return err
}

func hostKVDelete(key string) error {
	_, err := result(importKVDelete(strPtr(key), uint32(len(key))))
	return err
}

func hostKVScan(prefix, after string, limit int) ([]KV, bool, error) {
	b, err := result(importKVScan(strPtr(prefix), uint32(len(prefix)), strPtr(after), uint32(len(after)), int32(limit)))
	if err != nil {
		return nil, false, err
	}
	l, err := abi.DecodeKVList(b)
	if err != nil {
		return nil, false, &HostError{abi.StatusUnavailable, err.Error()}
	}
	out := make([]KV, len(l.Entries))
	for i, e := range l.Entries {
		out[i] = KV{Key: string(e.Key), Value: e.Value}
	}
	return out, l.More, nil
}

func hostConfig(key string) (string, bool) {
	r := importConfigGet(strPtr(key), uint32(len(key)))
	if r < 0 {
		take(0)
		return "", false
	}
	return string(take(r)), true
}

func hostNow() time.Time { return time.Unix(0, importNow()) }

func hostLog(level int32, msg string) { importLog(level, strPtr(msg), uint32(len(msg))) }

func hostSpanEvent(name string, attrs []abi.Attr) {
	b := abi.AppendAttrs(nil, attrs)
	importSpanEvent(strPtr(name), uint32(len(name)), bytesPtr(b), uint32(len(b)))
}

func hostSpanAttrs(attrs []abi.Attr) {
	b := abi.AppendAttrs(nil, attrs)
	importSpanAttrs(bytesPtr(b), uint32(len(b)))
}

// inBuf is the buffer handed out by hostd_alloc. The host writes the input
// envelope into it and then calls hostd_handle; one call at a time per
// instance, so one buffer suffices. Go's GC does not move objects, so the
// pointer stays valid while inBuf references it.
var inBuf []byte

//go:wasmexport hostd_alloc
func exportAlloc(size int32) unsafe.Pointer {
	if size <= 0 {
		size = 1
	}
	if int(size) > cap(inBuf) {
		inBuf = make([]byte, size)
	}
	return unsafe.Pointer(&inBuf[:cap(inBuf)][0])
}

//go:wasmexport hostd_abi_v1
func exportABIv1() {}

//go:wasmexport hostd_handle
func exportHandle(id int32, ptr unsafe.Pointer, n int32) int32 {
	var in []byte
	if n > 0 {
		in = unsafe.Slice((*byte)(ptr), n)
	}
	defer func() {
		if p := recover(); p != nil {
			// Report the panic's message, then let it continue: the
			// host discards an instance that trapped or exited.
			msg := fmt.Sprintf("panic: %v", p)
			importSetError(strPtr(msg), uint32(len(msg)))
			panic(p)
		}
	}()
	code, out, msg := dispatch(id, in)
	if code == abi.CodeOK {
		if len(out) > 0 {
			importSetOutput(bytesPtr(out), uint32(len(out)))
		}
	} else {
		importSetError(strPtr(msg), uint32(len(msg)))
	}
	return int32(code)
}

//go:build wasip1

// Command abidirect is a diagnostic guest for the plugin-call benchmark: it
// speaks hostd's ABI v1 directly (no sdk package), decodes the envelope
// with sdk/abi and parses the payload — the same ack callback as ackbench
// without the SDK's dispatch, so the benchmark can split the SDK's share of
// a call from the ABI's and the runtime's.
package main

import (
	"encoding/binary"
	"unsafe"

	"github.com/hostd-dev/hostd/sdk/abi"
)

//go:wasmimport hostd register
func importRegister(kind int32, namePtr unsafe.Pointer, nameLen uint32, id int32) int32

var inBuf []byte

var sink uint32

func init() {
	name := "BenchDirect"
	importRegister(int32(abi.KindAck), unsafe.Pointer(unsafe.StringData(name)), uint32(len(name)), 0)
	// BenchEmpty does nothing: the floor of a call through hostd's runtime.
	name = "BenchEmpty"
	importRegister(int32(abi.KindAck), unsafe.Pointer(unsafe.StringData(name)), uint32(len(name)), 1)
	// BenchLazy finds the payload in the envelope without decoding the
	// rest (no allocation): what an allocation-free guest decoder costs.
	name = "BenchLazy"
	importRegister(int32(abi.KindAck), unsafe.Pointer(unsafe.StringData(name)), uint32(len(name)), 2)
}

// payloadOf returns the payload field of a Message envelope: version,
// record type, u64 id, u32-length type, u32-length payload.
func payloadOf(b []byte) ([]byte, bool) {
	if len(b) < 2+8+4 || b[0] != abi.EnvelopeVersion || b[1] != byte(abi.RecMessage) {
		return nil, false
	}
	b = b[10:]
	n := uint64(binary.LittleEndian.Uint32(b))
	if n > uint64(len(b)-4) {
		return nil, false
	}
	b = b[4+n:]
	if len(b) < 4 {
		return nil, false
	}
	n = uint64(binary.LittleEndian.Uint32(b))
	if n > uint64(len(b)-4) {
		return nil, false
	}
	return b[4 : 4+n], true
}

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
	switch id {
	case 1:
		return int32(abi.CodeOK)
	case 2:
		p, ok := payloadOf(unsafe.Slice((*byte)(ptr), n))
		if !ok {
			return int32(abi.CodePermanent)
		}
		sink, _ = parse(p)
		return int32(abi.CodeOK)
	}
	m, err := abi.DecodeMessage(unsafe.Slice((*byte)(ptr), n))
	if err != nil {
		return int32(abi.CodePermanent)
	}
	sink, _ = parse(m.Payload)
	return int32(abi.CodeOK)
}

func parse(p []byte) (count uint32, sum uint64) {
	sum = 14695981039346656037
	inValue := false
	for _, c := range p {
		switch {
		case c == '=':
			inValue = true
		case c == ';':
			if inValue {
				count++
			}
			inValue = false
		case inValue:
			sum ^= uint64(c)
			sum *= 1099511628211
		}
	}
	return count, sum
}

func main() {}

//go:build wasip1

// Command guest is the Extism side of the plugin-call benchmark: one export,
// "ack", that parses the call's input with the same work function as the
// native baseline and the hostd plugin, and returns a 12-byte result.
//
// The Extism Go PDK is not available from the module proxy here, so this
// file talks to Extism's host module ("extism:host/env") directly, the way
// the PDK's Input() and OutputMemory() do: input is copied out 8 bytes per
// host call (input_load_u64, then input_load_u8 for the tail), and the
// output is written into Extism-allocated memory with store_u64/store_u8
// before output_set.
package main

import "encoding/binary"

//go:wasmimport extism:host/env input_length
func inputLength() uint64

//go:wasmimport extism:host/env input_load_u64
func inputLoadU64(off uint64) uint64

//go:wasmimport extism:host/env input_load_u8
func inputLoadU8(off uint64) uint32

//go:wasmimport extism:host/env alloc
func extismAlloc(n uint64) uint64

//go:wasmimport extism:host/env store_u64
func storeU64(off uint64, v uint64)

//go:wasmimport extism:host/env store_u8
func storeU8(off uint64, v uint32)

//go:wasmimport extism:host/env output_set
func outputSet(off, n uint64)

var buf []byte

func input() []byte {
	n := inputLength()
	if uint64(cap(buf)) < n {
		buf = make([]byte, n)
	}
	b := buf[:n]
	var i uint64
	for ; i+8 <= n; i += 8 {
		binary.LittleEndian.PutUint64(b[i:], inputLoadU64(i))
	}
	for ; i < n; i++ {
		b[i] = byte(inputLoadU8(i))
	}
	return b
}

func output(b []byte) {
	n := uint64(len(b))
	off := extismAlloc(n)
	var i uint64
	for ; i+8 <= n; i += 8 {
		storeU64(off+i, binary.LittleEndian.Uint64(b[i:]))
	}
	for ; i < n; i++ {
		storeU8(off+i, uint32(b[i]))
	}
	outputSet(off, n)
}

//go:wasmexport ack
func ack() int32 {
	var out [12]byte
	count, sum := parse(input())
	binary.LittleEndian.PutUint32(out[0:], count)
	binary.LittleEndian.PutUint64(out[4:], sum)
	output(out[:])
	return 0
}

// parse is the benchmark's unit of work, identical in every variant: the
// payload is "key=value;" records; it counts the records and folds every
// value into an FNV-1a hash.
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

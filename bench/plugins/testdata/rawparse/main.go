//go:build wasip1

// Command rawparse is the floor of the plugin-call benchmark: the same
// parse work exported directly (no hostd ABI, no SDK, no envelope), called
// through bare wazero with and without WithCloseOnContextDone, to show
// what the runtime itself costs and what termination checks cost.
package main

import "unsafe"

var buf [128 << 10]byte

//go:wasmexport buf_ptr
func bufPtr() uint32 { return uint32(uintptr(unsafe.Pointer(&buf[0]))) }

//go:wasmexport parse
func parseExport(n uint32) uint64 {
	if int(n) > len(buf) {
		return 0
	}
	c, s := parse(buf[:n])
	return s ^ uint64(c)
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

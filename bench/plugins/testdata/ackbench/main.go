// Command ackbench is the hostd side of the plugin-call benchmark: an ack
// callback for "BenchAck" that parses the payload (same work as the native
// baseline and the Extism guest) and returns its 12-byte result as a staged
// KV write.
package main

import (
	"encoding/binary"

	"github.com/hostd-dev/hostd/sdk"
)

func init() {
	// BenchParse does the work without writing the result (no host call).
	sdk.OnAck("BenchParse", func(m sdk.Message) error {
		sink, _ = parse(m.Payload)
		return nil
	})
	sdk.OnAck("BenchAck", func(m sdk.Message) error {
		var out [12]byte
		count, sum := parse(m.Payload)
		binary.LittleEndian.PutUint32(out[0:], count)
		binary.LittleEndian.PutUint64(out[4:], sum)
		return sdk.KVPut("result", out[:])
	})
}

// parse is pluginbench.Parse (a guest cannot import the bench package).
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

var sink uint32

func main() {}

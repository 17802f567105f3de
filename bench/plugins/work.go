package pluginbench

import "fmt"

// Parse is the benchmark's unit of work, identical in every variant
// (native, hostd plugin, Extism plugin — bench/extism has the same code):
// the payload is "key=value;" records; Parse counts the records and folds
// every value byte into an FNV-1a hash.
func Parse(p []byte) (count uint32, sum uint64) {
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

// Payload returns a deterministic payload of exactly n bytes made of
// "kNNNN=value-NNNN;" records.
func Payload(n int) []byte {
	p := make([]byte, 0, n+32)
	for i := 0; len(p) < n; i++ {
		p = fmt.Appendf(p, "k%04d=value-%04d;", i, i*7919%10000)
	}
	return p[:n]
}

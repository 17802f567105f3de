package wire

import (
	"bytes"
	"fmt"
	"strconv"
)

// Tick is a time tick: the Unix nanoseconds of an append, hostd's order of
// appends. In JSON it is a string of decimal digits ("1764633600123456789"),
// as protobuf's JSON mapping writes 64-bit integers: ticks are above 2^53,
// where JavaScript numbers (and jq) lose digits. Decoding accepts the
// string and, for compatibility with older hostd versions, a JSON number.
type Tick uint64

// String is the tick in decimal.
func (t Tick) String() string { return strconv.FormatUint(uint64(t), 10) }

// MarshalJSON writes the tick as a JSON string.
func (t Tick) MarshalJSON() ([]byte, error) {
	b := make([]byte, 0, 22)
	b = append(b, '"')
	b = strconv.AppendUint(b, uint64(t), 10)
	return append(b, '"'), nil
}

// UnmarshalJSON reads a JSON string of decimal digits or a JSON number
// (an integer in [0, 2^64-1]).
func (t *Tick) UnmarshalJSON(b []byte) error {
	if bytes.Equal(b, []byte("null")) {
		return nil // like encoding/json for other types: null leaves t alone
	}
	s := b
	if len(b) >= 2 && b[0] == '"' && b[len(b)-1] == '"' {
		s = b[1 : len(b)-1]
	}
	n, err := strconv.ParseUint(string(s), 10, 64)
	if err != nil {
		return fmt.Errorf("wire: time tick %s: want a string of decimal digits or a non-negative integer", truncate(b))
	}
	*t = Tick(n)
	return nil
}

func truncate(b []byte) string {
	if len(b) > 40 {
		return string(b[:40]) + "…"
	}
	return string(b)
}

package wire

import (
	"encoding/json"
	"math"
	"strconv"
	"testing"
)

func TestTickJSON(t *testing.T) {
	for _, v := range []Tick{0, 1, 1 << 53, 1<<53 + 1, 1764633600123456789, math.MaxUint64} {
		b, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		if want := `"` + strconv.FormatUint(uint64(v), 10) + `"`; string(b) != want {
			t.Fatalf("Marshal(%d) = %s, want %s", uint64(v), b, want)
		}
		var back Tick
		if err := json.Unmarshal(b, &back); err != nil || back != v {
			t.Fatalf("Unmarshal(%s) = %d, %v", b, uint64(back), err)
		}
		// A number (what hostd answered before ticks became strings) is
		// still accepted, exactly (no float rounding).
		if err := json.Unmarshal([]byte(strconv.FormatUint(uint64(v), 10)), &back); err != nil || back != v {
			t.Fatalf("Unmarshal(number %d) = %d, %v", uint64(v), uint64(back), err)
		}
	}
	var m Position
	if err := json.Unmarshal([]byte(`{"time_tick":"1764633600123456789"}`), &m); err != nil || m.Tick != 1764633600123456789 {
		t.Fatalf("in a struct: %d %v", uint64(m.Tick), err)
	}
	for _, bad := range []string{`"-1"`, `-1`, `"1.5"`, `1.5e18`, `"18446744073709551616"`, `""`, `"0x10"`, `true`, `{}`, `" 1"`} {
		var tk Tick
		if err := json.Unmarshal([]byte(bad), &tk); err == nil {
			t.Errorf("Unmarshal(%s) accepted: %d", bad, uint64(tk))
		}
	}
}

// FuzzTickJSON: decoding never panics, and whatever decodes re-encodes to
// a string that decodes to the same tick.
func FuzzTickJSON(f *testing.F) {
	for _, s := range []string{`"1764633600123456789"`, `17`, `"x"`, `null`, `"18446744073709551615"`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var tk Tick
		if err := tk.UnmarshalJSON(b); err != nil {
			return
		}
		out, err := json.Marshal(tk)
		if err != nil {
			t.Fatal(err)
		}
		var back Tick
		if err := json.Unmarshal(out, &back); err != nil || back != tk {
			t.Fatalf("%s -> %d -> %s -> %d %v", b, uint64(tk), out, uint64(back), err)
		}
	})
}

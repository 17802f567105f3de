package api

import (
	"net/url"
	"strconv"
	"testing"

	"github.com/hostd-dev/hostd/builtin/mapping"
)

// FuzzTranslateRequest: the translate routes' decoders take path values
// and a raw query from outside. Whatever arrives, they never panic; an
// error is a 400 invalid_argument naming a field; an accepted request is
// canonical (the values it returns format back to exactly the input).
//
//	go test ./host/api -run '^$' -fuzz '^FuzzTranslateRequest$' -fuzztime 30s
func FuzzTranslateRequest(f *testing.F) {
	for _, s := range []struct {
		physical     bool
		name, q, raw string
	}{
		{false, "orders", "0", "logic_offset=15"},
		{false, "_control", "0", "logic_offset=0"},
		{false, "orders", "00", "logic_offset=1"},
		{false, "orders", "100000", "logic_offset=1"},
		{false, "or/ders", "1", "logic_offset=18446744073709551616"},
		{false, "orders", "1", "logic_offset=1&logic_offset=2"},
		{false, "orders", "1", "logic_offset=%zz"},
		{false, "", "-1", ""},
		{true, "b", "17", "physical_offset=42"},
		{true, "b", "18446744073709551615", "physical_offset=18446744073709551615"},
		{true, "b\x00", "1", "physical_offset=1;x=2"},
		{true, "b", "1", "logic_offset=1"},
	} {
		f.Add(s.physical, s.name, s.q, s.raw)
	}
	f.Fuzz(func(t *testing.T, physical bool, name, queue, raw string) {
		q, _ := url.ParseQuery(raw) // what net/http hands the handler, errors and all
		check := func(err error) {
			ae, ok := err.(*Error)
			if !ok || ae.Status != 400 || ae.Code != CodeInvalidArgument || ae.Message == "" || ae.Details["field"] == nil {
				t.Fatalf("%q %q %q: error %T %v is not invalid_argument with a field", name, queue, raw, err, err)
			}
		}
		if physical {
			b, id, off, err := decodeTranslatePhysical(name, queue, q)
			if err != nil {
				check(err)
				return
			}
			if b != name || strconv.FormatUint(id, 10) != queue || strconv.FormatUint(off, 10) != q.Get("physical_offset") || len(q) != 1 {
				t.Fatalf("%q %q %q accepted as %q %d %d", name, queue, raw, b, id, off)
			}
			return
		}
		vc, off, err := decodeTranslateLogic(name, queue, q)
		if err != nil {
			check(err)
			return
		}
		tp, id, perr := mapping.ParseVChannel(vc)
		if perr != nil || tp != name || strconv.Itoa(id) != queue || strconv.FormatUint(off, 10) != q.Get("logic_offset") || len(q) != 1 {
			t.Fatalf("%q %q %q accepted as %q %d (%v)", name, queue, raw, vc, off, perr)
		}
	})
}

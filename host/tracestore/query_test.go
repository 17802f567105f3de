package tracestore_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/hostd-dev/hostd/host/tracestore"
)

// traceLine is one span file line: a root span of its own trace.
func traceLine(trace byte, start int, name string, errored bool) string {
	status := ""
	if errored {
		status = `,"status":{"code":2}`
	}
	return fmt.Sprintf(`{"resourceSpans":[{"scopeSpans":[{"spans":[{"traceId":"%032x","spanId":"00000000000000%02x","name":%q,"startTimeUnixNano":"%d","endTimeUnixNano":"%d"%s}]}]}]}`,
		trace, trace, name, start, start+10, status)
}

// Paging walks the traces newest first, ties broken by trace id, each
// once, whatever the page size; filters and the cursor combine.
func TestPageNewestFirst(t *testing.T) {
	st := tracestore.New()
	var lines []string
	// Seven traces, three of them starting at the same nanosecond.
	starts := []int{100, 300, 300, 300, 200, 50, 400}
	for i, s := range starts {
		lines = append(lines, traceLine(byte(i+1), s, fmt.Sprintf("op%d", i%2), i == 2))
	}
	if err := st.Add(strings.NewReader(strings.Join(lines, "\n")+"\n"), "f"); err != nil {
		t.Fatal(err)
	}
	all, next := st.Page(tracestore.Query{Limit: 100})
	if next != "" || len(all) != 7 {
		t.Fatalf("one page: %d items, next %q", len(all), next)
	}
	var order []string
	for _, s := range all {
		order = append(order, s.TraceID[30:])
	}
	if want := []string{"07", "02", "03", "04", "05", "01", "06"}; !slices.Equal(order, want) {
		t.Fatalf("order %v, want %v", order, want)
	}
	for size := 1; size <= 8; size++ {
		var got []string
		q := tracestore.Query{Limit: size}
		for {
			page, next := st.Page(q)
			for _, s := range page {
				got = append(got, s.TraceID[30:])
			}
			if next == "" {
				break
			}
			c, err := tracestore.ParseCursor(next)
			if err != nil {
				t.Fatal(err)
			}
			q.After = c
		}
		if !slices.Equal(got, order) {
			t.Fatalf("pages of %d: %v, want %v", size, got, order)
		}
	}
	errs, _ := st.Page(tracestore.Query{Limit: 10, Errors: true})
	if len(errs) != 1 || errs[0].TraceID[30:] != "03" || errs[0].Errors != 1 {
		t.Fatalf("errors only: %+v", errs)
	}
	c, _ := tracestore.CursorOf(all[2]) // after 03
	rest, _ := st.Page(tracestore.Query{Limit: 10, Root: "op1", After: &c})
	if len(rest) != 2 || rest[0].TraceID[30:] != "04" || rest[1].TraceID[30:] != "06" {
		t.Fatalf("root op1 after 03: %+v", rest)
	}
}

// FuzzParseCursor: page tokens come from outside; any string parses or
// fails without a panic, and a parsed cursor survives a round trip.
func FuzzParseCursor(f *testing.F) {
	c, _ := tracestore.ParseCursor("AAAAAAAAASwAAAAAAAAAAAAAAAAAAAAB")
	f.Add(c.Token())
	f.Add("")
	f.Add("garbage")
	f.Add("AAAAAAAAASwAAAAAAAAAAAAAAAAAAAAB==")
	f.Fuzz(func(t *testing.T, tok string) {
		c, err := tracestore.ParseCursor(tok)
		if err != nil || c == nil {
			return
		}
		again, err := tracestore.ParseCursor(c.Token())
		if err != nil || *again != *c {
			t.Fatalf("round trip of %q: %+v %v, want %+v", tok, again, err, c)
		}
	})
}

package tracestore_test

import (
	"bytes"
	"io"
	"testing"

	"github.com/hostd-dev/hostd/host/tracestore"
)

const fuzzSeedLine = `{"resourceSpans":[{"resource":{"attributes":[{"key":"service.name","value":{"stringValue":"hostd"}}]},"scopeSpans":[{"scope":{"name":"b"},"spans":[{"traceId":"0102030405060708090a0b0c0d0e0f10","spanId":"0000000000000001","parentSpanId":"0000000000000009","name":"process broadcast","kind":5,"startTimeUnixNano":"1","endTimeUnixNano":"5","attributes":[{"key":"hostd.broadcast.id","value":{"stringValue":"42"}},{"key":"hostd.attempt","value":{"intValue":"2"}}],"events":[{"name":"e","timeUnixNano":"2"}],"links":[{"traceId":"0102030405060708090a0b0c0d0e0f11","spanId":"0000000000000002"}],"status":{"code":2,"message":"trap"}}]}]}]}`

// FuzzDecodeLine: the line decoder of span files never panics, and what it
// accepts is a Traces value.
func FuzzDecodeLine(f *testing.F) {
	f.Add([]byte(fuzzSeedLine))
	f.Add([]byte(`{}`))
	f.Add([]byte(`{"resourceSpans":[{"scopeSpans":[{"spans":[{"traceId":"zz"}]}]}]}`))
	f.Add([]byte(fuzzSeedLine[:len(fuzzSeedLine)/2]))
	f.Fuzz(func(t *testing.T, line []byte) {
		td, err := tracestore.DecodeLine(line)
		if err == nil {
			_ = td.SpanCount()
		}
	})
}

// FuzzLoadAndRender: whole files of arbitrary bytes load, index, build
// trees, render and re-encode without a panic.
func FuzzLoadAndRender(f *testing.F) {
	f.Add([]byte(fuzzSeedLine + "\n" + fuzzSeedLine[:40]))
	f.Add([]byte(fuzzSeedLine + "\n\n" + `{"resourceSpans":[]}` + "\n"))
	f.Add([]byte("\n\n\x00{"))
	f.Fuzz(func(t *testing.T, data []byte) {
		st := tracestore.New()
		if err := st.Add(bytes.NewReader(data), "fuzz"); err != nil {
			t.Fatal(err)
		}
		s := st.Stats()
		if s.Torn+s.Corrupt != len(st.Warnings()) {
			t.Fatalf("stats %+v vs %d warnings", s, len(st.Warnings()))
		}
		for _, id := range st.TraceIDs() {
			if err := tracestore.Render(io.Discard, st, id, tracestore.RenderOptions{}); err != nil {
				t.Fatal(err)
			}
			_ = tracestore.NameTree(tracestore.BuildTree(st.Trace(id)))
		}
		_ = tracestore.WriteSummaries(io.Discard, st.Summaries(0))
		_, _ = st.Lookup("42")
		_ = st.OTLP().SpanCount()
	})
}

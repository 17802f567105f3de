package telemetry

import (
	"context"
	"encoding/json"
	"math"
	"testing"
	"time"

	"go.opentelemetry.io/collector/pdata/ptrace"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/sdk/instrumentation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"pgregory.net/rapid"
)

func genValue(t *rapid.T, depth int) attribute.Value {
	kinds := 10
	if depth > 1 {
		kinds = 8
	}
	switch rapid.IntRange(0, kinds).Draw(t, "kind") {
	case 0:
		return attribute.BoolValue(rapid.Bool().Draw(t, "b"))
	case 1:
		return attribute.Int64Value(rapid.Int64().Draw(t, "i"))
	case 2:
		return attribute.Float64Value(rapid.SampledFrom([]float64{0, -1.5, 1e300, math.SmallestNonzeroFloat64, math.NaN(), math.Inf(1), math.Inf(-1), rapid.Float64().Draw(t, "f")}).Draw(t, "fv"))
	case 3, 4:
		return attribute.StringValue(rapid.String().Draw(t, "s"))
	case 5:
		return attribute.BoolSliceValue(rapid.SliceOfN(rapid.Bool(), 0, 3).Draw(t, "bs"))
	case 6:
		return attribute.Int64SliceValue(rapid.SliceOfN(rapid.Int64(), 0, 3).Draw(t, "is"))
	case 7:
		return attribute.StringSliceValue(rapid.SliceOfN(rapid.String(), 0, 3).Draw(t, "ss"))
	case 8:
		return attribute.Float64SliceValue(rapid.SliceOfN(rapid.Float64(), 0, 3).Draw(t, "fs"))
	case 9:
		return attribute.ByteSliceValue(rapid.SliceOfN(rapid.Byte(), 0, 8).Draw(t, "bytes"))
	default:
		return attribute.MapValue(genAttrs(t, depth+1)...)
	}
}

func genAttrs(t *rapid.T, depth int) []attribute.KeyValue {
	n := rapid.IntRange(0, 4).Draw(t, "nattrs")
	kvs := make([]attribute.KeyValue, n)
	for i := range kvs {
		kvs[i] = attribute.KeyValue{Key: attribute.Key(rapid.StringN(1, 12, -1).Draw(t, "key")), Value: genValue(t, depth)}
	}
	return kvs
}

func genSC(t *rapid.T, remote bool) trace.SpanContext {
	var tid trace.TraceID
	var sid trace.SpanID
	copy(tid[:], rapid.SliceOfN(rapid.Byte(), 16, 16).Draw(t, "tid"))
	copy(sid[:], rapid.SliceOfN(rapid.Byte(), 8, 8).Draw(t, "sid"))
	tid[0], sid[0] = 1, 1 // valid
	ts, _ := trace.ParseTraceState(rapid.SampledFrom([]string{"", "a=1", "vendor=x,b=2"}).Draw(t, "ts"))
	return trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid, TraceState: ts,
		TraceFlags: trace.TraceFlags(rapid.SampledFrom([]byte{0, 1}).Draw(t, "flags")), Remote: remote})
}

// The hand-written encoder and pdata agree: pdata decodes our line to the
// same Traces as spansToTraces builds (compared through pdata's encoder).
func TestAppendTracesJSONMatchesPdata(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		rec := tracetest.NewSpanRecorder()
		res := resource.NewSchemaless(genAttrs(t, 0)...)
		if rapid.Bool().Draw(t, "schema") {
			res = resource.NewWithAttributes("https://opentelemetry.io/schemas/1.26.0", genAttrs(t, 0)...)
		}
		tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec), sdktrace.WithResource(res))
		nspans := rapid.IntRange(1, 3).Draw(t, "nspans")
		for range nspans {
			scope := rapid.SampledFrom([]string{"a", "b", ""}).Draw(t, "scope")
			tr := tp.Tracer(scope, trace.WithInstrumentationVersion(rapid.SampledFrom([]string{"", "v1"}).Draw(t, "ver")),
				trace.WithInstrumentationAttributes(genAttrs(t, 1)...))
			ctx := context.Background()
			switch rapid.IntRange(0, 2).Draw(t, "parent") {
			case 1:
				ctx = trace.ContextWithRemoteSpanContext(ctx, genSC(t, true))
			case 2:
				ctx = trace.ContextWithSpanContext(ctx, genSC(t, false))
			}
			start := time.Unix(0, rapid.Int64Range(1, 1<<62).Draw(t, "start"))
			var links []trace.Link
			for range rapid.IntRange(0, 2).Draw(t, "nlinks") {
				links = append(links, trace.Link{SpanContext: genSC(t, rapid.Bool().Draw(t, "lremote")), Attributes: genAttrs(t, 1)})
			}
			_, s := tr.Start(ctx, rapid.String().Draw(t, "name"), trace.WithTimestamp(start), trace.WithLinks(links...),
				trace.WithSpanKind(trace.SpanKind(rapid.IntRange(0, 5).Draw(t, "kind"))), trace.WithAttributes(genAttrs(t, 0)...))
			for range rapid.IntRange(0, 2).Draw(t, "nevents") {
				s.AddEvent(rapid.String().Draw(t, "ev"), trace.WithTimestamp(start.Add(time.Duration(rapid.IntRange(0, 1000).Draw(t, "evt")))),
					trace.WithAttributes(genAttrs(t, 1)...))
			}
			s.SetStatus(codes.Code(rapid.IntRange(0, 2).Draw(t, "status")), rapid.String().Draw(t, "desc"))
			s.End(trace.WithTimestamp(start.Add(time.Duration(rapid.Int64Range(0, 1e12).Draw(t, "dur")))))
		}
		spans := rec.Ended()
		line := appendTracesJSON(nil, spans)
		if !json.Valid(line) {
			t.Fatalf("invalid JSON: %s", line)
		}
		var u ptrace.JSONUnmarshaler
		got, err := u.UnmarshalTraces(line)
		if err != nil {
			t.Fatalf("pdata cannot decode %s: %v", line, err)
		}
		var m ptrace.JSONMarshaler
		a, _ := m.MarshalTraces(got)
		want, _ := m.MarshalTraces(spansToTraces(spans))
		if string(a) != string(want) {
			t.Fatalf("decoded differs:\n got %s\nwant %s\nline %s", a, want, line)
		}
	})
}

func TestAppendJSONStringEscapes(t *testing.T) {
	for _, s := range []string{"", "plain", "q\"b\\s", "\x00\x1f\x7f\n\r\t", "bad\xffutf8", "\u2028\u2029", "ünï😀"} {
		b := appendJSONString(nil, s)
		var back string
		if err := json.Unmarshal(b, &back); err != nil {
			t.Fatalf("%q -> %s: %v", s, b, err)
		}
		want := string([]rune(s)) // invalid bytes become U+FFFD
		if back != want {
			t.Fatalf("%q -> %s -> %q", s, b, back)
		}
	}
	_ = instrumentation.Scope{}
}

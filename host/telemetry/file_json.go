package telemetry

import (
	"encoding/base64"
	"encoding/hex"
	"math"
	"strconv"
	"unicode/utf8"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdkresource "go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// appendTracesJSON appends the spans as one OTLP-JSON TracesData — the
// document ptrace.JSONMarshaler writes for spansToTraces(spans), encoded
// directly from the SDK's spans. It exists for speed: the file exporter
// runs on every span end, and going through pdata costs ~10x more CPU
// (BenchmarkEncodeSpan). TestAppendTracesJSONMatchesPdata keeps the two
// equal (decoded by pdata, they are the same Traces) over random spans.
//
// Field names and encodings follow the OTLP/JSON mapping: ids in hex,
// 64-bit integers and timestamps as decimal strings, enums as numbers,
// bytes in base64, empty fields omitted.
func appendTracesJSON(b []byte, spans []sdktrace.ReadOnlySpan) []byte {
	b = append(b, `{"resourceSpans":[`...)
	// Group by resource, then by scope, in order of first appearance (as
	// spansToTraces does). A batch is almost always one span.
	type group struct {
		res   *sdkresource.Resource
		spans []sdktrace.ReadOnlySpan
	}
	var groups []group
	for _, s := range spans {
		if s == nil {
			continue
		}
		found := false
		for i := range groups {
			if groups[i].res == s.Resource() {
				groups[i].spans = append(groups[i].spans, s)
				found = true
				break
			}
		}
		if !found {
			groups = append(groups, group{res: s.Resource(), spans: []sdktrace.ReadOnlySpan{s}})
		}
	}
	for gi, g := range groups {
		if gi > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"resource":{`...)
		if g.res != nil && g.res.Len() > 0 {
			b = appendAttrsField(b, false, "attributes", g.res.Attributes())
		}
		b = append(b, `},"scopeSpans":[`...)
		done := make([]bool, len(g.spans))
		first := true
		for i, s := range g.spans {
			if done[i] {
				continue
			}
			sc := s.InstrumentationScope()
			if !first {
				b = append(b, ',')
			}
			first = false
			b = append(b, `{"scope":{`...)
			sep := false
			if sc.Name != "" {
				b = appendStringField(b, sep, "name", sc.Name)
				sep = true
			}
			if sc.Version != "" {
				b = appendStringField(b, sep, "version", sc.Version)
				sep = true
			}
			if sc.Attributes.Len() > 0 {
				b = appendAttrsField(b, sep, "attributes", sc.Attributes.ToSlice())
			}
			b = append(b, `},"spans":[`...)
			for j := i; j < len(g.spans); j++ {
				o := g.spans[j].InstrumentationScope()
				if done[j] || o.Name != sc.Name || o.Version != sc.Version || o.SchemaURL != sc.SchemaURL {
					continue
				}
				if j > i {
					b = append(b, ',')
				}
				done[j] = true
				b = appendSpanJSON(b, g.spans[j])
			}
			b = append(b, ']')
			if sc.SchemaURL != "" {
				b = appendStringField(b, true, "schemaUrl", sc.SchemaURL)
			}
			b = append(b, '}')
		}
		b = append(b, ']')
		if g.res != nil && g.res.SchemaURL() != "" {
			b = appendStringField(b, true, "schemaUrl", g.res.SchemaURL())
		}
		b = append(b, '}')
	}
	return append(b, "]}"...)
}

func appendSpanJSON(b []byte, s sdktrace.ReadOnlySpan) []byte {
	sc := s.SpanContext()
	b = append(b, `{"traceId":"`...)
	tid := sc.TraceID()
	b = hex.AppendEncode(b, tid[:])
	b = append(b, `","spanId":"`...)
	sid := sc.SpanID()
	b = hex.AppendEncode(b, sid[:])
	b = append(b, '"')
	if ts := sc.TraceState().String(); ts != "" {
		b = appendStringField(b, true, "traceState", ts)
	}
	flags := uint32(sc.TraceFlags())
	if p := s.Parent(); p.IsValid() {
		b = append(b, `,"parentSpanId":"`...)
		pid := p.SpanID()
		b = hex.AppendEncode(b, pid[:])
		b = append(b, '"')
		flags |= otlpFlagHasIsRemote
		if p.IsRemote() {
			flags |= otlpFlagIsRemote
		}
	}
	if flags != 0 {
		b = append(b, `,"flags":`...)
		b = strconv.AppendUint(b, uint64(flags), 10)
	}
	if n := s.Name(); n != "" {
		b = appendStringField(b, true, "name", n)
	}
	if k := otlpKind(s.SpanKind()); k != 0 {
		b = append(b, `,"kind":`...)
		b = strconv.AppendInt(b, int64(k), 10)
	}
	b = appendTimeField(b, "startTimeUnixNano", s.StartTime().UnixNano(), s.StartTime().IsZero())
	b = appendTimeField(b, "endTimeUnixNano", s.EndTime().UnixNano(), s.EndTime().IsZero())
	if attrs := s.Attributes(); len(attrs) > 0 {
		b = appendAttrsField(b, true, "attributes", attrs)
	}
	b = appendCountField(b, "droppedAttributesCount", s.DroppedAttributes())
	if evs := s.Events(); len(evs) > 0 {
		b = append(b, `,"events":[`...)
		for i, ev := range evs {
			if i > 0 {
				b = append(b, ',')
			}
			b = append(b, '{')
			sep := false
			if !ev.Time.IsZero() && ev.Time.UnixNano() != 0 {
				b = append(b, `"timeUnixNano":"`...)
				b = strconv.AppendUint(b, uint64(ev.Time.UnixNano()), 10)
				b = append(b, '"')
				sep = true
			}
			if ev.Name != "" {
				b = appendStringField(b, sep, "name", ev.Name)
				sep = true
			}
			if len(ev.Attributes) > 0 {
				b = appendAttrsField(b, sep, "attributes", ev.Attributes)
				sep = true
			}
			if ev.DroppedAttributeCount > 0 {
				if sep {
					b = append(b, ',')
				}
				b = append(b, `"droppedAttributesCount":`...)
				b = strconv.AppendInt(b, int64(ev.DroppedAttributeCount), 10)
			}
			b = append(b, '}')
		}
		b = append(b, ']')
	}
	b = appendCountField(b, "droppedEventsCount", s.DroppedEvents())
	if lks := s.Links(); len(lks) > 0 {
		b = append(b, `,"links":[`...)
		for i, l := range lks {
			if i > 0 {
				b = append(b, ',')
			}
			b = append(b, `{"traceId":"`...)
			ltid := l.SpanContext.TraceID()
			b = hex.AppendEncode(b, ltid[:])
			b = append(b, `","spanId":"`...)
			lsid := l.SpanContext.SpanID()
			b = hex.AppendEncode(b, lsid[:])
			b = append(b, '"')
			if ts := l.SpanContext.TraceState().String(); ts != "" {
				b = appendStringField(b, true, "traceState", ts)
			}
			if len(l.Attributes) > 0 {
				b = appendAttrsField(b, true, "attributes", l.Attributes)
			}
			b = appendCountField(b, "droppedAttributesCount", l.DroppedAttributeCount)
			lf := uint32(l.SpanContext.TraceFlags()) | otlpFlagHasIsRemote
			if l.SpanContext.IsRemote() {
				lf |= otlpFlagIsRemote
			}
			b = append(b, `,"flags":`...)
			b = strconv.AppendUint(b, uint64(lf), 10)
			b = append(b, '}')
		}
		b = append(b, ']')
	}
	b = appendCountField(b, "droppedLinksCount", s.DroppedLinks())
	st := s.Status()
	code := 0
	switch st.Code {
	case codes.Ok:
		code = 1
	case codes.Error:
		code = 2
	}
	if st.Description != "" || code != 0 {
		b = append(b, `,"status":{`...)
		sep := false
		if st.Description != "" {
			b = appendStringField(b, false, "message", st.Description)
			sep = true
		}
		if code != 0 {
			if sep {
				b = append(b, ',')
			}
			b = append(b, `"code":`...)
			b = strconv.AppendInt(b, int64(code), 10)
		}
		b = append(b, '}')
	}
	return append(b, '}')
}

func appendTimeField(b []byte, name string, ns int64, zero bool) []byte {
	if zero || ns == 0 {
		return b
	}
	b = append(b, ',', '"')
	b = append(b, name...)
	b = append(b, `":"`...)
	b = strconv.AppendUint(b, uint64(ns), 10)
	return append(b, '"')
}

func appendCountField(b []byte, name string, n int) []byte {
	if n <= 0 {
		return b
	}
	b = append(b, ',', '"')
	b = append(b, name...)
	b = append(b, '"', ':')
	return strconv.AppendInt(b, int64(uint32(min(n, math.MaxUint32))), 10)
}

func appendStringField(b []byte, sep bool, name, v string) []byte {
	if sep {
		b = append(b, ',')
	}
	b = append(b, '"')
	b = append(b, name...)
	b = append(b, '"', ':')
	return appendJSONString(b, v)
}

func appendAttrsField(b []byte, sep bool, name string, kvs []attribute.KeyValue) []byte {
	if sep {
		b = append(b, ',')
	}
	b = append(b, '"')
	b = append(b, name...)
	b = append(b, `":`...)
	return appendKVs(b, kvs)
}

// dedupKVs keeps one entry per key — at the first key's position, with the
// last value — as OTLP requires unique keys and pcommon.Map.PutEmpty does.
// The SDK dedups span attributes but not those of events, links or maps.
func dedupKVs(kvs []attribute.KeyValue) []attribute.KeyValue {
	dup := false
	for i := 1; i < len(kvs) && !dup; i++ {
		for j := 0; j < i; j++ {
			if kvs[i].Key == kvs[j].Key {
				dup = true
				break
			}
		}
	}
	if !dup {
		return kvs
	}
	out := make([]attribute.KeyValue, 0, len(kvs))
	pos := make(map[attribute.Key]int, len(kvs))
	for _, kv := range kvs {
		if i, ok := pos[kv.Key]; ok {
			out[i].Value = kv.Value
			continue
		}
		pos[kv.Key] = len(out)
		out = append(out, kv)
	}
	return out
}

func appendKVs(b []byte, kvs []attribute.KeyValue) []byte {
	if len(kvs) > 1 {
		kvs = dedupKVs(kvs)
	}
	b = append(b, '[')
	for i, kv := range kvs {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"key":`...)
		b = appendJSONString(b, string(kv.Key))
		b = append(b, `,"value":`...)
		b = appendValue(b, kv.Value)
		b = append(b, '}')
	}
	return append(b, ']')
}

func appendValue(b []byte, v attribute.Value) []byte {
	switch v.Type() {
	case attribute.BOOL:
		return append(strconv.AppendBool(append(b, `{"boolValue":`...), v.AsBool()), '}')
	case attribute.INT64:
		b = append(b, `{"intValue":"`...)
		b = strconv.AppendInt(b, v.AsInt64(), 10)
		return append(b, `"}`...)
	case attribute.FLOAT64:
		return append(appendDouble(append(b, `{"doubleValue":`...), v.AsFloat64()), '}')
	case attribute.STRING:
		return append(appendJSONString(append(b, `{"stringValue":`...), v.AsString()), '}')
	case attribute.BOOLSLICE:
		b = append(b, `{"arrayValue":{"values":[`...)
		for i, x := range v.AsBoolSlice() {
			if i > 0 {
				b = append(b, ',')
			}
			b = append(strconv.AppendBool(append(b, `{"boolValue":`...), x), '}')
		}
		return append(b, "]}}"...)
	case attribute.INT64SLICE:
		b = append(b, `{"arrayValue":{"values":[`...)
		for i, x := range v.AsInt64Slice() {
			if i > 0 {
				b = append(b, ',')
			}
			b = append(b, `{"intValue":"`...)
			b = strconv.AppendInt(b, x, 10)
			b = append(b, `"}`...)
		}
		return append(b, "]}}"...)
	case attribute.FLOAT64SLICE:
		b = append(b, `{"arrayValue":{"values":[`...)
		for i, x := range v.AsFloat64Slice() {
			if i > 0 {
				b = append(b, ',')
			}
			b = append(appendDouble(append(b, `{"doubleValue":`...), x), '}')
		}
		return append(b, "]}}"...)
	case attribute.STRINGSLICE:
		b = append(b, `{"arrayValue":{"values":[`...)
		for i, x := range v.AsStringSlice() {
			if i > 0 {
				b = append(b, ',')
			}
			b = append(appendJSONString(append(b, `{"stringValue":`...), x), '}')
		}
		return append(b, "]}}"...)
	case attribute.BYTESLICE:
		b = append(b, `{"bytesValue":"`...)
		b = base64.StdEncoding.AppendEncode(b, v.AsByteSlice())
		return append(b, `"}`...)
	case attribute.SLICE:
		b = append(b, `{"arrayValue":{"values":[`...)
		for i, x := range v.AsSlice() {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendValue(b, x)
		}
		return append(b, "]}}"...)
	case attribute.MAP:
		b = append(b, `{"kvlistValue":{"values":`...)
		b = appendKVs(b, v.AsMap())
		return append(b, "}}"...)
	default:
		return append(b, "{}"...)
	}
}

// appendDouble writes a finite double as a JSON number, and NaN/±Inf as the
// strings the OTLP/JSON mapping uses for them.
func appendDouble(b []byte, f float64) []byte {
	switch {
	case math.IsNaN(f):
		return append(b, `"NaN"`...)
	case math.IsInf(f, 1):
		return append(b, `"Infinity"`...)
	case math.IsInf(f, -1):
		return append(b, `"-Infinity"`...)
	}
	return strconv.AppendFloat(b, f, 'g', -1, 64)
}

const hexDigits = "0123456789abcdef"

// appendJSONString appends s as a JSON string; invalid UTF-8 becomes U+FFFD
// (as encoding/json does).
func appendJSONString(b []byte, s string) []byte {
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' && c != 0x7f {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '"', '\\':
				b = append(b, '\\', c)
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default:
				b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
			i += size
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' {
			b = append(b, s[start:i]...)
			b = append(b, '\\', 'u', '2', '0', '2', hexDigits[r&0xf])
			i += size
			start = i
			continue
		}
		i += size
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}

// OTLP span flag bits (opentelemetry-proto trace.proto, SpanFlags): the low
// byte holds the W3C trace flags; bit 8 says whether bit 9 is known, bit 9
// says the parent (or the link target) was remote.
const (
	otlpFlagHasIsRemote = 0x100
	otlpFlagIsRemote    = 0x200
)

// otlpKind maps an SDK span kind to the OTLP enum (same numbering;
// anything unknown is UNSPECIFIED).
func otlpKind(k trace.SpanKind) int32 {
	if k >= trace.SpanKindInternal && k <= trace.SpanKindConsumer {
		return int32(k)
	}
	return 0
}

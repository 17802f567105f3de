package telemetry

import (
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/ptrace"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdkresource "go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// spansToTraces converts finished SDK spans into the OTLP data model
// through pdata: the reference the direct encoder (file_json.go) is checked
// against. Spans
// are grouped by resource and instrumentation scope in the order they come,
// so one batch of a single span gives one ResourceSpans with one ScopeSpans.
func spansToTraces(spans []sdktrace.ReadOnlySpan) ptrace.Traces {
	td := ptrace.NewTraces()
	type scopeKey struct {
		res   *sdkresource.Resource
		name  string
		ver   string
		schem string
	}
	resIdx := map[*sdkresource.Resource]ptrace.ResourceSpans{}
	scopeIdx := map[scopeKey]ptrace.ScopeSpans{}
	for _, s := range spans {
		if s == nil {
			continue
		}
		res := s.Resource()
		rs, ok := resIdx[res]
		if !ok {
			rs = td.ResourceSpans().AppendEmpty()
			if res != nil {
				rs.SetSchemaUrl(res.SchemaURL())
				putAttrs(rs.Resource().Attributes(), res.Attributes())
			}
			resIdx[res] = rs
		}
		sc := s.InstrumentationScope()
		k := scopeKey{res, sc.Name, sc.Version, sc.SchemaURL}
		ss, ok := scopeIdx[k]
		if !ok {
			ss = rs.ScopeSpans().AppendEmpty()
			ss.SetSchemaUrl(sc.SchemaURL)
			ss.Scope().SetName(sc.Name)
			ss.Scope().SetVersion(sc.Version)
			putAttrs(ss.Scope().Attributes(), sc.Attributes.ToSlice())
			scopeIdx[k] = ss
		}
		convertSpan(ss.Spans().AppendEmpty(), s)
	}
	return td
}

func convertSpan(dst ptrace.Span, s sdktrace.ReadOnlySpan) {
	sc := s.SpanContext()
	dst.SetTraceID(pcommon.TraceID(sc.TraceID()))
	dst.SetSpanID(pcommon.SpanID(sc.SpanID()))
	dst.TraceState().FromRaw(sc.TraceState().String())
	flags := uint32(sc.TraceFlags())
	if p := s.Parent(); p.IsValid() {
		dst.SetParentSpanID(pcommon.SpanID(p.SpanID()))
		flags |= otlpFlagHasIsRemote
		if p.IsRemote() {
			flags |= otlpFlagIsRemote
		}
	}
	dst.SetFlags(flags)
	dst.SetName(s.Name())
	dst.SetKind(convertKind(s.SpanKind()))
	dst.SetStartTimestamp(pcommon.NewTimestampFromTime(s.StartTime()))
	dst.SetEndTimestamp(pcommon.NewTimestampFromTime(s.EndTime()))
	putAttrs(dst.Attributes(), s.Attributes())
	dst.SetDroppedAttributesCount(uint32(max(s.DroppedAttributes(), 0)))
	for _, ev := range s.Events() {
		e := dst.Events().AppendEmpty()
		e.SetName(ev.Name)
		e.SetTimestamp(pcommon.NewTimestampFromTime(ev.Time))
		putAttrs(e.Attributes(), ev.Attributes)
		e.SetDroppedAttributesCount(uint32(max(ev.DroppedAttributeCount, 0)))
	}
	dst.SetDroppedEventsCount(uint32(max(s.DroppedEvents(), 0)))
	for _, ln := range s.Links() {
		l := dst.Links().AppendEmpty()
		l.SetTraceID(pcommon.TraceID(ln.SpanContext.TraceID()))
		l.SetSpanID(pcommon.SpanID(ln.SpanContext.SpanID()))
		l.TraceState().FromRaw(ln.SpanContext.TraceState().String())
		lf := uint32(ln.SpanContext.TraceFlags()) | otlpFlagHasIsRemote
		if ln.SpanContext.IsRemote() {
			lf |= otlpFlagIsRemote
		}
		l.SetFlags(lf)
		putAttrs(l.Attributes(), ln.Attributes)
		l.SetDroppedAttributesCount(uint32(max(ln.DroppedAttributeCount, 0)))
	}
	dst.SetDroppedLinksCount(uint32(max(s.DroppedLinks(), 0)))
	st := s.Status()
	switch st.Code {
	case codes.Error:
		dst.Status().SetCode(ptrace.StatusCodeError)
	case codes.Ok:
		dst.Status().SetCode(ptrace.StatusCodeOk)
	default:
		dst.Status().SetCode(ptrace.StatusCodeUnset)
	}
	dst.Status().SetMessage(st.Description)
}

func putAttrs(m pcommon.Map, kvs []attribute.KeyValue) {
	m.EnsureCapacity(len(kvs))
	for _, kv := range kvs {
		putValue(m.PutEmpty(string(kv.Key)), kv.Value)
	}
}

func putValue(dst pcommon.Value, v attribute.Value) {
	switch v.Type() {
	case attribute.BOOL:
		dst.SetBool(v.AsBool())
	case attribute.INT64:
		dst.SetInt(v.AsInt64())
	case attribute.FLOAT64:
		dst.SetDouble(v.AsFloat64())
	case attribute.STRING:
		dst.SetStr(v.AsString())
	case attribute.BOOLSLICE:
		sl := dst.SetEmptySlice()
		for _, b := range v.AsBoolSlice() {
			sl.AppendEmpty().SetBool(b)
		}
	case attribute.INT64SLICE:
		sl := dst.SetEmptySlice()
		for _, i := range v.AsInt64Slice() {
			sl.AppendEmpty().SetInt(i)
		}
	case attribute.FLOAT64SLICE:
		sl := dst.SetEmptySlice()
		for _, f := range v.AsFloat64Slice() {
			sl.AppendEmpty().SetDouble(f)
		}
	case attribute.STRINGSLICE:
		sl := dst.SetEmptySlice()
		for _, s := range v.AsStringSlice() {
			sl.AppendEmpty().SetStr(s)
		}
	case attribute.BYTESLICE:
		dst.SetEmptyBytes().FromRaw(v.AsByteSlice())
	case attribute.SLICE:
		sl := dst.SetEmptySlice()
		for _, e := range v.AsSlice() {
			putValue(sl.AppendEmpty(), e)
		}
	case attribute.MAP:
		putAttrs(dst.SetEmptyMap(), v.AsMap())
	default:
		// EMPTY: leave the value empty, as OTLP has no other encoding for it.
	}
}

func convertKind(k trace.SpanKind) ptrace.SpanKind { return ptrace.SpanKind(otlpKind(k)) }

package telemetry

import (
	"context"
	"testing"

	"go.opentelemetry.io/collector/pdata/ptrace"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
)

// typicalSpan is a `send <vchannel>` span as the broadcast engine makes it.
func typicalSpan(b testing.TB) sdktrace.ReadOnlySpan {
	rec := tracetest.NewSpanRecorder()
	res := resource.NewSchemaless(attribute.String("service.name", "hostd"), attribute.String("service.instance.id", "0123456789abcdef"), attribute.String("service.version", "v1.0.0"))
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec), sdktrace.WithResource(res))
	_, s := tp.Tracer("github.com/hostd-dev/hostd/builtin/broadcast").Start(context.Background(), "send orders/0",
		trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(
			attribute.String("messaging.system", "hostd"), attribute.String("messaging.operation.type", "send"),
			attribute.String("messaging.message.id", "12345"), attribute.Int64("hostd.broadcast.id", 12345),
			attribute.String("hostd.message.type", "CreateCollection"), attribute.Int("hostd.attempt", 1),
			attribute.Bool("hostd.recovered", false), attribute.String("messaging.destination.name", "orders/0")))
	s.End()
	return rec.Ended()[0]
}

func BenchmarkEncodeSpan(b *testing.B) {
	spans := []sdktrace.ReadOnlySpan{typicalSpan(b)}
	b.Run("pdata", func(b *testing.B) {
		var m ptrace.JSONMarshaler
		b.ReportAllocs()
		for b.Loop() {
			if _, err := m.MarshalTraces(spansToTraces(spans)); err != nil {
				b.Fatal(err)
			}
		}
	})
}

func BenchmarkEncodeSpanDirect(b *testing.B) {
	spans := []sdktrace.ReadOnlySpan{typicalSpan(b)}
	var buf []byte
	b.ReportAllocs()
	for b.Loop() {
		buf = appendTracesJSON(buf[:0], spans)
	}
}

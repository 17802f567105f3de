package tracestore_test

import (
	"context"
	"encoding/binary"
	"errors"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/hostd-dev/hostd/host/telemetry"
)

// seqIDs is a deterministic IDGenerator: trace ids and span ids count up
// from a per-process base, so golden files are stable.
type seqIDs struct {
	mu          sync.Mutex
	base        byte
	trace, span uint64
}

func (g *seqIDs) NewIDs(ctx context.Context) (trace.TraceID, trace.SpanID) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.trace++
	var t trace.TraceID
	t[0] = g.base
	binary.BigEndian.PutUint64(t[8:], g.trace)
	return t, g.nextSpan()
}

func (g *seqIDs) NewSpanID(ctx context.Context, _ trace.TraceID) trace.SpanID {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.nextSpan()
}

func (g *seqIDs) nextSpan() trace.SpanID {
	g.span++
	var s trace.SpanID
	s[0] = g.base
	binary.BigEndian.PutUint32(s[4:], uint32(g.span))
	return s
}

var t0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

func at(ms float64) time.Time { return t0.Add(time.Duration(ms * float64(time.Millisecond))) }

func provider(t *testing.T, dir, instance string, base byte) *sdktrace.TracerProvider {
	t.Helper()
	exp, err := telemetry.NewFileExporter(telemetry.FileExporterConfig{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	res := resource.NewSchemaless(attribute.String("service.name", "hostd"), attribute.String("service.instance.id", instance))
	return sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp), sdktrace.WithResource(res),
		sdktrace.WithIDGenerator(&seqIDs{base: base}))
}

// writeScenario writes, through the real file exporter, the spans of
// tracing.md's model: a broadcast whose first append to topic/0 fails and
// whose callback fails once before a "kill -9", then is recovered by a new
// process whose callback fails once more and then succeeds. A second trace
// is a lock request whose caller's parent span is not in the files.
// It returns the broadcast's trace id.
func writeScenario(t *testing.T, dir string) trace.TraceID {
	t.Helper()
	ctx := context.Background()

	// First process.
	tp1 := provider(t, dir, "instance-1", 0xa1)
	tr := tp1.Tracer("github.com/hostd-dev/hostd/builtin/broadcast")
	bc := []attribute.KeyValue{
		attribute.String("messaging.system", "hostd"),
		attribute.String("hostd.broadcast.id", "42"),
		attribute.String("hostd.message.type", "CreateCollection"),
	}
	rctx, req := tr.Start(ctx, "POST /v1/broadcasts", trace.WithSpanKind(trace.SpanKindServer), trace.WithTimestamp(at(0)),
		trace.WithAttributes(attribute.String("http.request.method", "POST"), attribute.String("http.route", "/v1/broadcasts")))
	cctx, create := tr.Start(rctx, "create broadcast", trace.WithSpanKind(trace.SpanKindProducer), trace.WithTimestamp(at(1)),
		trace.WithAttributes(append(bc, attribute.String("messaging.operation.type", "create"))...))
	create.End(trace.WithTimestamp(at(3.5)))
	createSC := create.SpanContext()

	send := func(vch string, attempt int, from, to float64, fail error) {
		_, s := tr.Start(cctx, "send "+vch, trace.WithSpanKind(trace.SpanKindClient), trace.WithTimestamp(at(from)),
			trace.WithAttributes(append(bc, attribute.String("messaging.operation.type", "send"),
				attribute.String("messaging.destination.name", vch), attribute.Int("hostd.attempt", attempt))...))
		if fail != nil {
			s.RecordError(fail, trace.WithTimestamp(at(to)))
			s.SetStatus(codes.Error, fail.Error())
		}
		s.End(trace.WithTimestamp(at(to)))
	}
	send("topic/0", 1, 4, 5, errors.New("wal: append refused"))
	send("_control/0", 1, 4, 6, nil)
	send("topic/0", 2, 15, 17, nil)
	req.End(trace.WithTimestamp(at(18)))

	process := func(tr trace.Tracer, pctx context.Context, attempt int, recovered bool, link *trace.SpanContext, from, to float64, fail error) {
		opts := []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindConsumer), trace.WithTimestamp(at(from)),
			trace.WithAttributes(append(bc, attribute.String("messaging.operation.type", "process"),
				attribute.String("hostd.plugin", "collections"), attribute.Int("hostd.attempt", attempt))...)}
		if recovered {
			opts = append(opts, trace.WithAttributes(attribute.Bool("hostd.recovered", true)))
		}
		if link != nil {
			opts = append(opts, trace.WithLinks(trace.Link{SpanContext: *link}))
		}
		_, s := tr.Start(pctx, "process broadcast", opts...)
		s.AddEvent("guest: kv.put", trace.WithTimestamp(at(from+0.5)), trace.WithAttributes(attribute.String("key", "coll/db1.users")))
		if fail != nil {
			s.RecordError(fail, trace.WithTimestamp(at(to)))
			s.SetStatus(codes.Error, fail.Error())
		}
		s.End(trace.WithTimestamp(at(to)))
	}
	process(tr, cctx, 1, false, nil, 20, 22, errors.New("plugin trap: unreachable"))
	// kill -9: nothing else of process 1 is exported.
	if err := tp1.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}

	// Second process: a hostd.recover root with one link per recovered
	// broadcast, callback attempts continuing under the persisted context.
	tp2 := provider(t, dir, "instance-2", 0xb2)
	tr2 := tp2.Tracer("github.com/hostd-dev/hostd/builtin/broadcast")
	_, rec := tr2.Start(ctx, "hostd.recover", trace.WithTimestamp(at(1500)),
		trace.WithLinks(trace.Link{SpanContext: createSC, Attributes: []attribute.KeyValue{attribute.String("hostd.broadcast.id", "42")}}),
		trace.WithAttributes(attribute.Int("hostd.recover.tasks", 1)))
	rec.End(trace.WithTimestamp(at(1502)))
	recSC := rec.SpanContext()
	pctx := trace.ContextWithRemoteSpanContext(ctx, createSC.WithRemote(true))
	process(tr2, pctx, 2, true, &recSC, 1503, 1504, errors.New("plugin trap: unreachable"))
	process(tr2, pctx, 3, true, &recSC, 1514, 1516, nil)

	// A lock request whose caller's span lives in another service.
	caller := trace.NewSpanContext(trace.SpanContextConfig{
		TraceID: trace.TraceID{0xc3, 15: 1}, SpanID: trace.SpanID{0xc3, 7: 1}, TraceFlags: trace.FlagsSampled, Remote: true,
	})
	lctx, lreq := tr2.Start(trace.ContextWithRemoteSpanContext(ctx, caller), "POST /v1/locks", trace.WithSpanKind(trace.SpanKindServer), trace.WithTimestamp(at(1600)))
	_, acq := tr2.Start(lctx, "lock acquire", trace.WithTimestamp(at(1600.2)), trace.WithAttributes(attribute.String("hostd.lock.key", "collection:db1.users")))
	acq.End(trace.WithTimestamp(at(1600.7)))
	lreq.End(trace.WithTimestamp(at(1601)))
	if err := tp2.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	return createSC.TraceID()
}

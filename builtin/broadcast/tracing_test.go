package broadcast

// The six tests of tracing.md ("Tests to require"), against the real engine
// on real Badger, each with its own TracerProvider and in-memory recorder
// (no global provider is touched, so they can run in parallel).

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/hostd-dev/hostd/runtime/catalog"
)

const traceType = "TraceTest"

// frozenClock never fires After: a callback that failed waits for its retry
// until the engine is closed, as if hostd were killed during the backoff.
type frozenClock struct{}

func (frozenClock) Now() time.Time                       { return time.Now() }
func (frozenClock) After(time.Duration) <-chan time.Time { return nil }

// failFirst fails the first n appends of one vchannel (fault injection).
type failFirst struct {
	Channels
	vc string
	mu sync.Mutex
	n  int
}

func (f *failFirst) Append(ctx context.Context, es []AppendEntry) ([]AppendOutcome, error) {
	outs := make([]AppendOutcome, len(es))
	var keep []AppendEntry
	var idx []int
	f.mu.Lock()
	for i, e := range es {
		if e.VChannel == f.vc && f.n > 0 {
			f.n--
			outs[i].Err = errors.New("injected append failure")
			continue
		}
		keep = append(keep, e)
		idx = append(idx, i)
	}
	f.mu.Unlock()
	if len(keep) > 0 {
		got, err := f.Channels.Append(ctx, keep)
		if err != nil {
			return nil, err
		}
		for j, i := range idx {
			outs[i] = got[j]
		}
	}
	return outs, nil
}

// traced is one engine "process": its provider and recorder.
type traced struct {
	rec *tracetest.SpanRecorder
	tp  *sdktrace.TracerProvider
}

func newTraced(t *testing.T) *traced {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec),
		sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.AlwaysSample())))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	return &traced{rec: rec, tp: tp}
}

func (p *traced) named(name string) []sdktrace.ReadOnlySpan {
	var out []sdktrace.ReadOnlySpan
	for _, s := range p.rec.Ended() {
		if s.Name() == name {
			out = append(out, s)
		}
	}
	sort.SliceStable(out, func(i, j int) bool {
		if a, b := attrInt(out[i], "hostd.attempt"), attrInt(out[j], "hostd.attempt"); a != b {
			return a < b
		}
		return out[i].StartTime().Before(out[j].StartTime())
	})
	return out
}

func attr(s sdktrace.ReadOnlySpan, k string) (attribute.Value, bool) {
	for _, kv := range s.Attributes() {
		if string(kv.Key) == k {
			return kv.Value, true
		}
	}
	return attribute.Value{}, false
}

func attrInt(s sdktrace.ReadOnlySpan, k string) int64 {
	v, _ := attr(s, k)
	return v.AsInt64()
}

func attrBool(s sdktrace.ReadOnlySpan, k string) bool {
	v, _ := attr(s, k)
	return v.AsBool()
}

func hasException(s sdktrace.ReadOnlySpan) bool {
	for _, e := range s.Events() {
		if e.Name == "exception" {
			return true
		}
	}
	return false
}

// tracedEnv builds an env whose engine uses *cur as its provider and *clock
// as its clock at every (re)start, with the handler ack for traceType.
func tracedEnv(t *testing.T, queues []string, cur **traced, clock *Clock, ch func(Channels) Channels,
	ack func(context.Context, *AckCall) (AckResult, error)) *env {
	t.Helper()
	return newEnv(t, queues, func(o *Options) {
		o.TracerProvider = (*cur).tp
		if *clock != nil {
			o.Clock = *clock
		}
		if ch != nil {
			o.Channels = ch(o.Channels)
		}
	}, func(e *Engine) {
		if err := e.Register(traceType, fnHandler{ack: ack}, TypeOptions{}); err != nil {
			t.Fatal(err)
		}
	})
}

// Clock is the engine's clock type, named here for tracedEnv's pointer.
type Clock = interface {
	Now() time.Time
	After(time.Duration) <-chan time.Time
}

// record reads a task record straight from the catalog.
func (v *env) record(id uint64) taskRecord {
	v.t.Helper()
	var rec taskRecord
	err := v.store.View(context.Background(), func(r catalog.Reader) error {
		b, _, err := r.Get(taskKey(id))
		if err != nil {
			return err
		}
		return json.Unmarshal(b, &rec)
	})
	if err != nil {
		v.t.Fatalf("read task %d: %v", id, err)
	}
	return rec
}

// waitRecord polls the catalog until cond holds for task id's record.
func (v *env) waitRecord(id uint64, what string, cond func(taskRecord) bool) taskRecord {
	v.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		rec := v.record(id)
		if cond(rec) {
			return rec
		}
		if time.Now().After(deadline) {
			v.t.Fatalf("task %d: %s never persisted; record %+v", id, what, rec)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// request starts the API request span the caller's context carries.
func request(ctx context.Context, p *traced) (context.Context, trace.Span) {
	return p.tp.Tracer("test/api").Start(ctx, "POST /v1/broadcasts", trace.WithSpanKind(trace.SpanKindServer))
}

// 1. The persisted carrier holds the `create` span's ids (and nothing but
// the W3C TraceContext); the create span's parent is the request span, and
// it has ended before any attempt starts.
func TestTracing1CarrierIsCreateSpan(t *testing.T) {
	p := newTraced(t)
	var clock Clock
	v := tracedEnv(t, vcs(1), &p, &clock, nil, nil)
	ctx, req := request(context.Background(), p)
	res := v.submit(ctx, Request{Message: Message{Type: traceType}, VChannels: vcs(1)})
	req.End()

	creates := p.named("create broadcast")
	if len(creates) != 1 {
		t.Fatalf("%d create spans", len(creates))
	}
	create := creates[0]
	rec := v.record(res.ID)
	for k := range rec.Trace {
		if k != "traceparent" && k != "tracestate" {
			t.Errorf("carrier has %q: only the TraceContext propagator may write it", k)
		}
	}
	sc := trace.SpanContextFromContext(propagation.TraceContext{}.Extract(context.Background(), propagation.MapCarrier(rec.Trace)))
	if sc.TraceID() != create.SpanContext().TraceID() || sc.SpanID() != create.SpanContext().SpanID() || !sc.IsSampled() {
		t.Fatalf("carrier %v, create span %v", rec.Trace, create.SpanContext())
	}
	if create.Parent().SpanID() != req.SpanContext().SpanID() || create.SpanKind() != trace.SpanKindProducer {
		t.Fatalf("create parent %v kind %v, request %v", create.Parent().SpanID(), create.SpanKind(), req.SpanContext().SpanID())
	}
	if attrInt(create, "hostd.broadcast.id") != int64(res.ID) {
		t.Fatalf("create hostd.broadcast.id %d", attrInt(create, "hostd.broadcast.id"))
	}
	// The task is persisted in the same commit as its first appends, so
	// the first `send` spans overlap `create`; but none ends before it
	// (no append is done before its task is durable) and the callback
	// starts after it.
	for _, name := range []string{"send t/0", "send _control/0"} {
		for _, s := range p.named(name) {
			if s.EndTime().Before(create.EndTime()) {
				t.Errorf("%s ended %v before create ended", name, create.EndTime().Sub(s.EndTime()))
			}
		}
	}
	for _, s := range p.named("process broadcast") {
		if s.StartTime().Before(create.EndTime()) {
			t.Errorf("process broadcast started %v before create ended", create.EndTime().Sub(s.StartTime()))
		}
	}
}

// 2. N attempts give N sibling spans under `create`, hostd.attempt 1..N,
// errors recorded only on the failed ones — for appends and callbacks.
func TestTracing2AttemptsAreSiblings(t *testing.T) {
	p := newTraced(t)
	var clock Clock
	var calls int
	var mu sync.Mutex
	v := tracedEnv(t, vcs(1), &p, &clock,
		func(c Channels) Channels { return &failFirst{Channels: c, vc: "t/0", n: 2} },
		func(ctx context.Context, c *AckCall) (AckResult, error) {
			mu.Lock()
			defer mu.Unlock()
			calls++
			if c.Attempt <= 2 {
				return AckResult{}, fmt.Errorf("attempt %d fails", c.Attempt)
			}
			return AckResult{}, nil
		})
	ctx, req := request(context.Background(), p)
	res := v.submit(ctx, Request{Message: Message{Type: traceType}, VChannels: vcs(1)})
	req.End()
	if res.State != StateTombstone {
		t.Fatalf("result %+v", res)
	}
	create := p.named("create broadcast")[0].SpanContext()
	check := func(name string, kind trace.SpanKind, n int) {
		t.Helper()
		spans := p.named(name)
		if len(spans) != n {
			t.Fatalf("%s: %d spans, want %d", name, len(spans), n)
		}
		for i, s := range spans {
			if s.Parent().SpanID() != create.SpanID() || s.SpanContext().TraceID() != create.TraceID() {
				t.Errorf("%s #%d: parent %v, want create %v", name, i+1, s.Parent().SpanID(), create.SpanID())
			}
			if s.SpanKind() != kind || attrInt(s, "hostd.attempt") != int64(i+1) {
				t.Errorf("%s #%d: kind %v attempt %d", name, i+1, s.SpanKind(), attrInt(s, "hostd.attempt"))
			}
			failed := i < n-1
			if (s.Status().Code == codes.Error) != failed || hasException(s) != failed {
				t.Errorf("%s attempt %d: status %v exception %v, want failed=%v", name, i+1, s.Status(), hasException(s), failed)
			}
			if attrBool(s, "hostd.recovered") {
				t.Errorf("%s attempt %d marked recovered without a restart", name, i+1)
			}
		}
	}
	check("send t/0", trace.SpanKindClient, 3)
	check("send _control/0", trace.SpanKindClient, 1)
	check("process broadcast", trace.SpanKindConsumer, 3)
	if calls != 3 || v.record(res.ID).Attempts != 3 {
		t.Fatalf("calls %d, persisted attempts %d", calls, v.record(res.ID).Attempts)
	}
}

// failUntilRestart builds an env whose handler fails in the first process
// (whose clock is frozen, so the retry never comes: a kill during backoff)
// and then as ackAfter says; it submits one broadcast under parent and
// waits until `failures` attempts are persisted, then restarts with a new
// provider. It returns the env, the broadcast id and both processes.
func failUntilRestart(t *testing.T, parent context.Context, p1 *traced, ackAfter func(*AckCall) error) (*env, uint64, *traced) {
	t.Helper()
	cur := p1
	var clock Clock = frozenClock{}
	var restarted bool
	var mu sync.Mutex
	v := tracedEnv(t, vcs(1), &cur, &clock, nil, func(ctx context.Context, c *AckCall) (AckResult, error) {
		mu.Lock()
		r := restarted
		mu.Unlock()
		if !r {
			return AckResult{}, fmt.Errorf("plugin trap (attempt %d)", c.Attempt)
		}
		return AckResult{}, ackAfter(c)
	})
	res := v.submit(parent, Request{Message: Message{Type: traceType}, VChannels: vcs(1), Wait: WaitPersisted})
	v.waitRecord(res.ID, "attempt 1", func(r taskRecord) bool { return r.Attempts == 1 })
	p2 := newTraced(t)
	cur, clock = p2, nil
	mu.Lock()
	restarted = true
	mu.Unlock()
	v.restart()
	return v, res.ID, p2
}

// 3. After a restart (new provider and recorder, same catalog) callback
// spans share the original trace id, their parent is `create` (remote),
// hostd.recovered=true, attempts continue, and each has exactly one link:
// to this start's `hostd.recover` root, which links back to the broadcast.
func TestTracing3RestartKeepsTrace(t *testing.T) {
	p1 := newTraced(t)
	ctx, req := request(context.Background(), p1)
	v, id, p2 := failUntilRestart(t, ctx, p1, func(c *AckCall) error {
		if c.Attempt == 2 {
			return errors.New("still failing")
		}
		return nil
	})
	req.End()
	v.waitState(id, StateTombstone)

	create := p1.named("create broadcast")[0].SpanContext()
	before := p1.named("process broadcast")
	if len(before) != 1 || attrInt(before[0], "hostd.attempt") != 1 || attrBool(before[0], "hostd.recovered") || len(before[0].Links()) != 0 {
		t.Fatalf("before restart: %d spans", len(before))
	}
	recovers := p2.named("hostd.recover")
	if len(recovers) != 1 {
		t.Fatalf("%d hostd.recover spans", len(recovers))
	}
	rs := recovers[0]
	if rs.Parent().IsValid() || rs.SpanContext().TraceID() == create.TraceID() {
		t.Fatal("hostd.recover must be a new root in its own trace")
	}
	if len(rs.Links()) != 1 || rs.Links()[0].SpanContext.SpanID() != create.SpanID() {
		t.Fatalf("hostd.recover links %v", rs.Links())
	}
	after := p2.named("process broadcast")
	if len(after) != 2 {
		t.Fatalf("%d callback spans after restart", len(after))
	}
	for i, s := range after {
		want := int64(i + 2)
		if s.SpanContext().TraceID() != create.TraceID() || s.Parent().SpanID() != create.SpanID() || !s.Parent().IsRemote() {
			t.Errorf("attempt %d: trace %v parent %v remote %v", want, s.SpanContext().TraceID(), s.Parent().SpanID(), s.Parent().IsRemote())
		}
		if attrInt(s, "hostd.attempt") != want || !attrBool(s, "hostd.recovered") {
			t.Errorf("span %d: attempt %d recovered %v", i, attrInt(s, "hostd.attempt"), attrBool(s, "hostd.recovered"))
		}
		if len(s.Links()) != 1 || s.Links()[0].SpanContext.SpanID() != rs.SpanContext().SpanID() ||
			s.Links()[0].SpanContext.TraceID() == s.SpanContext().TraceID() {
			t.Errorf("attempt %d links %v, want exactly one to hostd.recover", want, s.Links())
		}
	}
	if after[0].Status().Code != codes.Error || after[1].Status().Code == codes.Error {
		t.Errorf("statuses %v %v", after[0].Status(), after[1].Status())
	}
	if len(p2.named("send t/0")) != 0 {
		t.Error("an appended vchannel was sent again after the restart")
	}
}

// 4. The sampled flag survives a restart: a sampled broadcast's recovered
// attempts are recorded, an unsampled one's are not, although the new
// provider samples every root.
func TestTracing4SampledFlagSurvivesRestart(t *testing.T) {
	for _, sampled := range []bool{true, false} {
		t.Run(fmt.Sprintf("sampled=%v", sampled), func(t *testing.T) {
			p1 := newTraced(t)
			flags := trace.TraceFlags(0)
			if sampled {
				flags = trace.FlagsSampled
			}
			caller := trace.NewSpanContext(trace.SpanContextConfig{
				TraceID: trace.TraceID{0xca, 15: 1}, SpanID: trace.SpanID{0xca, 7: 1}, TraceFlags: flags, Remote: true,
			})
			ctx := trace.ContextWithRemoteSpanContext(context.Background(), caller)
			v, id, p2 := failUntilRestart(t, ctx, p1, func(*AckCall) error { return nil })
			v.waitState(id, StateTombstone)

			rec := v.record(id)
			tp := rec.Trace["traceparent"]
			if !strings.HasPrefix(tp, "00-ca000000000000000000000000000001-") || strings.HasSuffix(tp, "-01") != sampled {
				t.Fatalf("persisted traceparent %q (sampled=%v)", tp, sampled)
			}
			var inTrace []sdktrace.ReadOnlySpan
			for _, s := range append(p1.rec.Ended(), p2.rec.Ended()...) {
				if s.SpanContext().TraceID() == caller.TraceID() {
					inTrace = append(inTrace, s)
				}
			}
			if sampled && len(inTrace) != 5 { // create, send t/0, send _control/0, process 1 before; process 2 after
				t.Fatalf("sampled: %d spans recorded in the trace", len(inTrace))
			}
			if !sampled && len(inTrace) != 0 {
				t.Fatalf("unsampled: %d spans recorded", len(inTrace))
			}
			if got := len(p2.named("process broadcast")); got != map[bool]int{true: 1, false: 0}[sampled] {
				t.Fatalf("recovered callback spans recorded: %d", got)
			}
		})
	}
}

// 5. A garbled or missing carrier starts a new root trace and never fails
// the work.
func TestTracing5GarbledCarrier(t *testing.T) {
	for name, carrier := range map[string]map[string]string{
		"garbage":  {"traceparent": "not-a-traceparent"},
		"zero-ids": {"traceparent": "00-00000000000000000000000000000000-0000000000000000-01"},
		"missing":  nil,
	} {
		t.Run(name, func(t *testing.T) {
			p1 := newTraced(t)
			cur := p1
			var clock Clock = frozenClock{}
			var ok bool
			var mu sync.Mutex
			v := tracedEnv(t, vcs(1), &cur, &clock, nil, func(context.Context, *AckCall) (AckResult, error) {
				mu.Lock()
				defer mu.Unlock()
				if !ok {
					return AckResult{}, errors.New("not yet")
				}
				return AckResult{}, nil
			})
			res := v.submit(context.Background(), Request{Message: Message{Type: traceType}, VChannels: vcs(1), Wait: WaitPersisted})
			v.waitRecord(res.ID, "attempt 1", func(r taskRecord) bool { return r.Attempts == 1 })
			v.close()
			// Garble the persisted carrier while hostd is down.
			o := catalog.DefaultOptions(v.dir)
			o.GCInterval = 0
			st, err := catalog.Open(o)
			if err != nil {
				t.Fatal(err)
			}
			var rec taskRecord
			if err := st.View(context.Background(), func(r catalog.Reader) error {
				b, _, err := r.Get(taskKey(res.ID))
				if err != nil {
					return err
				}
				return json.Unmarshal(b, &rec)
			}); err != nil {
				t.Fatal(err)
			}
			rec.Trace = carrier
			if _, err := st.Commit(context.Background(), &catalog.Batch{Ops: []catalog.Op{{Key: taskKey(res.ID), Value: mustJSON(&rec)}}}); err != nil {
				t.Fatal(err)
			}
			st.Close()

			p2 := newTraced(t)
			cur, clock = p2, nil
			mu.Lock()
			ok = true
			mu.Unlock()
			if err := v.open(); err != nil {
				t.Fatal(err)
			}
			v.waitState(res.ID, StateTombstone)
			ps := p2.named("process broadcast")
			if len(ps) != 1 {
				t.Fatalf("%d callback spans", len(ps))
			}
			if ps[0].Parent().IsValid() || !ps[0].SpanContext().IsValid() {
				t.Fatalf("callback span parent %v: want a new root", ps[0].Parent())
			}
			if attrInt(ps[0], "hostd.attempt") != 2 || !attrBool(ps[0], "hostd.recovered") {
				t.Fatal("attempt counter or recovered flag lost with the carrier")
			}
			if rs := p2.named("hostd.recover"); len(rs) != 1 || len(rs[0].Links()) != 0 {
				t.Fatalf("hostd.recover must not link to an invalid context: %v", rs)
			}
		})
	}
}

// 6. The span-name tree built from every ended span (both processes) is
// exactly the expected tree.
func TestTracing6TreeShape(t *testing.T) {
	p1 := newTraced(t)
	ctx, req := request(context.Background(), p1)
	v, id, p2 := failUntilRestart(t, ctx, p1, func(c *AckCall) error {
		if c.Attempt == 2 {
			return errors.New("still failing")
		}
		return nil
	})
	req.End()
	v.waitState(id, StateTombstone)

	got := spanTree(append(p1.rec.Ended(), p2.rec.Ended()...))
	want := `POST /v1/broadcasts SERVER
  create broadcast PRODUCER
    process broadcast CONSUMER attempt=1 error
    process broadcast CONSUMER attempt=2 recovered error links=1
    process broadcast CONSUMER attempt=3 recovered links=1
    send _control/0 CLIENT attempt=1 links=1
    send t/0 CLIENT attempt=1 links=1
append round links=2
hostd.recover
hostd.recover links=1
`
	if got != want {
		t.Fatalf("span tree:\n%s\nwant:\n%s", got, want)
	}
}

// spanTree renders ended spans as an indented tree of names with kind,
// attempt, recovered, error and link count; siblings sorted by that text.
// A span whose parent was not recorded is marked "(parent not exported)".
func spanTree(spans []sdktrace.ReadOnlySpan) string {
	label := func(s sdktrace.ReadOnlySpan) string {
		l := s.Name()
		if k := s.SpanKind(); k != trace.SpanKindInternal {
			l += " " + strings.ToUpper(k.String())
		}
		if a, ok := attr(s, "hostd.attempt"); ok {
			l += fmt.Sprintf(" attempt=%d", a.AsInt64())
		}
		if attrBool(s, "hostd.recovered") {
			l += " recovered"
		}
		if s.Status().Code == codes.Error {
			l += " error"
		}
		if n := len(s.Links()); n > 0 {
			l += fmt.Sprintf(" links=%d", n)
		}
		return l
	}
	byID := map[trace.SpanID]sdktrace.ReadOnlySpan{}
	for _, s := range spans {
		byID[s.SpanContext().SpanID()] = s
	}
	children := map[trace.SpanID][]sdktrace.ReadOnlySpan{}
	var roots []string
	var b strings.Builder
	var walk func(s sdktrace.ReadOnlySpan, depth int) string
	walk = func(s sdktrace.ReadOnlySpan, depth int) string {
		out := strings.Repeat("  ", depth) + label(s) + "\n"
		var kids []string
		for _, c := range children[s.SpanContext().SpanID()] {
			kids = append(kids, walk(c, depth+1))
		}
		slices.Sort(kids)
		return out + strings.Join(kids, "")
	}
	for _, s := range spans {
		if p := s.Parent(); p.IsValid() {
			children[p.SpanID()] = append(children[p.SpanID()], s)
		}
	}
	for _, s := range spans {
		p := s.Parent()
		switch {
		case !p.IsValid():
			roots = append(roots, walk(s, 0))
		case byID[p.SpanID()] == nil:
			roots = append(roots, "(parent not exported)\n"+walk(s, 1))
		}
	}
	slices.Sort(roots)
	for _, r := range roots {
		b.WriteString(r)
	}
	return b.String()
}

// TestTracingAppendRoundLinks: an append round is its own root span,
// linked to every `send` span it carried, and each of those links back,
// so a broadcast's trace names the round that appended it.
func TestTracingAppendRoundLinks(t *testing.T) {
	p := newTraced(t)
	var clock Clock
	v := tracedEnv(t, vcs(2), &p, &clock, nil, nil)
	res := v.submit(context.Background(), Request{Message: Message{Type: traceType}, VChannels: vcs(2)})
	rounds := p.named("append round")
	if len(rounds) == 0 {
		t.Fatal("no append round span")
	}
	byID := map[trace.SpanID]sdktrace.ReadOnlySpan{}
	for _, r := range rounds {
		if r.Parent().IsValid() {
			t.Fatalf("append round has parent %v: it must be a root", r.Parent())
		}
		byID[r.SpanContext().SpanID()] = r
	}
	sends := append(p.named("send t/0"), append(p.named("send t/1"), p.named("send _control/0")...)...)
	if len(sends) != 3 {
		t.Fatalf("%d send spans, want 3", len(sends))
	}
	for _, s := range sends {
		if attrInt(s, "hostd.broadcast.id") != int64(res.ID) {
			t.Fatalf("send span of broadcast %d", attrInt(s, "hostd.broadcast.id"))
		}
		var round sdktrace.ReadOnlySpan
		for _, l := range s.Links() {
			if r, ok := byID[l.SpanContext.SpanID()]; ok {
				round = r
			}
		}
		if round == nil {
			t.Fatalf("%s has no link to an append round (links %v)", s.Name(), s.Links())
		}
		back := false
		for _, l := range round.Links() {
			if l.SpanContext.SpanID() == s.SpanContext().SpanID() {
				back = true
			}
		}
		if !back {
			t.Fatalf("append round does not link back to %s", s.Name())
		}
		if attrInt(round, "hostd.append.entries") < 1 || attrInt(round, "hostd.append.broadcasts") < 1 {
			t.Fatalf("round attributes %v", round.Attributes())
		}
	}
}

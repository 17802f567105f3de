package mapping_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/hostd-dev/hostd/builtin/mapping"
	"github.com/hostd-dev/hostd/runtime/catalog"
	"github.com/hostd-dev/hostd/runtime/wal"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

type env struct {
	dir string
	db  catalog.Store
	w   wal.Log // the embedded WAL, or jswal while TestOnJetStream runs
	m   *mapping.Mapping
}

type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}
func (c *fakeClock) After(d time.Duration) <-chan time.Time { return time.After(d) }
func (c *fakeClock) Add(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

func brokers(names ...string) []mapping.Broker {
	out := make([]mapping.Broker, len(names))
	for i, n := range names {
		out[i] = mapping.Broker{Name: n}
	}
	return out
}

func newEnv(t testing.TB, cfg mapping.Config) *env {
	t.Helper()
	return openEnv(t, t.TempDir(), cfg)
}

// openEnv opens the catalog of dir (Badger, or an etcd catalog while
// TestOnEtcd runs), the WAL on it (or, while TestOnJetStream runs, a
// jswal Log on its nats-server) and the mapping.
func openEnv(t testing.TB, dir string, cfg mapping.Config) *env {
	t.Helper()
	var db catalog.Store
	if onJS != nil {
		db = openBadger(t, dir)
		l := onJS.open(t, dir, 0, cfg.Clock)
		cfg.Store, cfg.Log = db, l
		m, err := mapping.Open(context.Background(), cfg)
		if err != nil {
			t.Fatal(err)
		}
		return &env{dir: dir, db: db, w: l, m: m}
	}
	if onEtcd != nil {
		db = onEtcd.MustOpen(t, dir)
	} else {
		o := catalog.DefaultOptions(dir)
		o.GCInterval = 0
		bdb, err := catalog.Open(o)
		if err != nil {
			t.Fatal(err)
		}
		db = bdb
	}
	t.Cleanup(func() { db.Close() })
	w, err := wal.Open(context.Background(), wal.Config{Store: db, Clock: cfg.Clock})
	if err != nil {
		t.Fatal(err)
	}
	cfg.Store, cfg.WAL = db, w
	m, err := mapping.Open(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	return &env{dir: dir, db: db, w: w, m: m}
}

var ctx = context.Background()

func (e *env) apply(t testing.TB, c mapping.Change) *mapping.Plan {
	t.Helper()
	p, err := e.m.Apply(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func (e *env) appendN(t testing.TB, vc string, n int, tag string) []wal.Position {
	t.Helper()
	var out []wal.Position
	for i := 0; i < n; i++ {
		p, err := e.m.Append(ctx, vc, []wal.Record{{Payload: []byte(fmt.Sprintf("%s-%d", tag, i))}})
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, p...)
	}
	return out
}

func (e *env) counts(t testing.TB, topic string) map[string]int {
	t.Helper()
	ti, err := e.m.Describe(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	c := map[string]int{}
	for _, q := range ti.Queues {
		c[q.Broker]++
	}
	return c
}

// readAll reads vc from offset from to max and asserts one gap-free,
// duplicate-free sequence.
func (e *env) readAll(t testing.TB, vc string, from uint64) []wal.Message {
	t.Helper()
	_, max, err := e.m.Bounds(ctx, vc)
	if err != nil {
		t.Fatal(err)
	}
	var out []wal.Message
	for from < max {
		msgs, err := e.m.Read(ctx, vc, from, 7)
		if err != nil {
			t.Fatal(err)
		}
		if len(msgs) == 0 {
			t.Fatalf("read %s at %d < max %d returned nothing", vc, from, max)
		}
		for _, m := range msgs {
			if m.Offset != from {
				t.Fatalf("%s: expected offset %d, got %d", vc, from, m.Offset)
			}
			from++
			out = append(out, m)
		}
	}
	return out
}

func within1(t *testing.T, c map[string]int, want int) {
	t.Helper()
	lo, hi, total := 1<<30, 0, 0
	for _, n := range c {
		lo, hi, total = min(lo, n), max(hi, n), total+n
	}
	if hi-lo > 1 || total != want {
		t.Fatalf("counts %v (total %d, want %d) not within 1", c, total, want)
	}
}

// Scenario 1: 6 queues over 3 brokers: 2 each; grow to 8: within 1, ids 0..7.
func TestScenario1CreateGrow(t *testing.T) {
	e := newEnv(t, mapping.Config{Brokers: brokers("a", "b", "c")})
	e.apply(t, mapping.Change{Kind: mapping.KindCreate, Topic: "t", Queues: 6})
	c := e.counts(t, "t")
	if c["a"] != 2 || c["b"] != 2 || c["c"] != 2 {
		t.Fatalf("counts %v", c)
	}
	p := e.apply(t, mapping.Change{Kind: mapping.KindGrow, Topic: "t", Queues: 8})
	if p.Epoch != 2 {
		t.Fatalf("epoch %d after grow", p.Epoch)
	}
	within1(t, e.counts(t, "t"), 8)
	ti, _ := e.m.Describe(ctx, "t")
	for i, q := range ti.Queues {
		if q.ID != i || q.VChannel != fmt.Sprintf("t/%d", i) {
			t.Fatalf("queue %d is %+v", i, q)
		}
	}
	if err := e.m.Check(ctx, "t/7"); err != nil {
		t.Fatal(err)
	}
	if err := e.m.Check(ctx, "t/8"); !errors.Is(err, wal.ErrNoChannel) {
		t.Fatalf("t/8: %v", err)
	}
}

// Scenario 2: remap 1 queue A→B after 10 appends: offsets continue at 10.
func TestScenario2RemapContinues(t *testing.T) {
	e := newEnv(t, mapping.Config{Brokers: brokers("a", "b")})
	e.apply(t, mapping.Change{Kind: mapping.KindCreate, Topic: "t", Queues: 1, Brokers: []string{"a"}})
	e.appendN(t, "t/0", 10, "x")
	p := e.apply(t, mapping.Change{Kind: mapping.KindRemap, Topic: "t", Brokers: []string{"b"}})
	if len(p.Moved) != 1 || p.Epoch != 2 {
		t.Fatalf("plan %+v", p)
	}
	pos := e.appendN(t, "t/0", 5, "y")
	if pos[0].Offset != 10 {
		t.Fatalf("first offset after remap %d, want 10", pos[0].Offset)
	}
	if pos[0].Queue == "" || pos[0].QueueOffset != 0 {
		t.Fatalf("position %+v: want a fresh physical queue at 0", pos[0])
	}
	msgs := e.readAll(t, "t/0", 0)
	if len(msgs) != 15 || string(msgs[9].Payload) != "x-9" || string(msgs[10].Payload) != "y-0" {
		t.Fatalf("read %d messages", len(msgs))
	}
	if msgs[9].Queue == msgs[10].Queue {
		t.Fatal("both segments in one physical queue")
	}
	ti, _ := e.m.Describe(ctx, "t")
	segs := ti.Queues[0].Segments
	if len(segs) != 2 || segs[0].EndOffset == nil || *segs[0].EndOffset != 10 || segs[1].LogicOffset != 10 || segs[0].Broker != "a" || segs[1].Broker != "b" {
		t.Fatalf("segments %+v", segs)
	}
	if segs[0].FirstTime == nil || segs[0].LastTime == nil || segs[0].LastTime.Before(*segs[0].FirstTime) {
		t.Fatalf("closed segment times %+v", segs[0])
	}
	// Translation both ways.
	pq, off, err := e.m.LogicToPhysical(ctx, "t/0", 12)
	if err != nil || pq != segs[1].PhysicalQueue || off != 2 {
		t.Fatalf("LogicToPhysical: %s %d %v", pq, off, err)
	}
	vc, lo, err := e.m.PhysicalToLogic(ctx, segs[0].PhysicalQueue, 3)
	if err != nil || vc != "t/0" || lo != 3 {
		t.Fatalf("PhysicalToLogic: %s %d %v", vc, lo, err)
	}
}

// Scenario 3: A→B→C→A with appends between; group offset survives.
func TestScenario3RemapChain(t *testing.T) {
	e := newEnv(t, mapping.Config{Brokers: brokers("a", "b", "c")})
	e.apply(t, mapping.Change{Kind: mapping.KindCreate, Topic: "t", Queues: 1, Brokers: []string{"a"}})
	total := 0
	for i, b := range []string{"b", "c", "a"} {
		e.appendN(t, "t/0", 3+i, fmt.Sprintf("r%d", i))
		total += 3 + i
		if err := e.m.CommitOffset(ctx, "g", "t/0", uint64(total-1)); err != nil {
			t.Fatal(err)
		}
		e.apply(t, mapping.Change{Kind: mapping.KindRemap, Topic: "t", Brokers: []string{b}})
		g, err := e.m.GroupOffset(ctx, "g", "t/0")
		if err != nil || g.Offset != uint64(total-1) || g.Lag != 1 {
			t.Fatalf("group after remap to %s: %+v %v", b, g, err)
		}
	}
	e.appendN(t, "t/0", 2, "last")
	total += 2
	msgs := e.readAll(t, "t/0", 0)
	if len(msgs) != total {
		t.Fatalf("read %d, appended %d", len(msgs), total)
	}
	ti, _ := e.m.Describe(ctx, "t")
	if n := len(ti.Queues[0].Segments); n != 4 {
		t.Fatalf("%d segments, want 4", n)
	}
	if len(ti.Groups) != 1 || ti.Groups[0].Lag != 3 {
		t.Fatalf("describe groups %+v", ti.Groups)
	}
}

// Scenario 4: remap to the same brokers: no change, epoch unchanged.
func TestScenario4RemapSame(t *testing.T) {
	e := newEnv(t, mapping.Config{Brokers: brokers("a", "b", "c")})
	e.apply(t, mapping.Change{Kind: mapping.KindCreate, Topic: "t", Queues: 7})
	e.appendN(t, "t/3", 2, "x")
	p := e.apply(t, mapping.Change{Kind: mapping.KindRemap, Topic: "t"})
	if !p.NoChange || p.Epoch != 1 || len(p.Moved) != 0 {
		t.Fatalf("plan %+v", p)
	}
	ti, _ := e.m.Describe(ctx, "t")
	if ti.Topic.Epoch != 1 {
		t.Fatalf("epoch %d", ti.Topic.Epoch)
	}
}

type badPolicy struct{ out []string }

func (p badPolicy) Assign(context.Context, mapping.PolicyInput) ([]string, error) { return p.out, nil }
func (badPolicy) Source() string                                                  { return "plugin bad-plugin" }

// Scenario 5: shrink, unknown broker and bad policy output are rejected
// and change nothing.
func TestScenario5Rejections(t *testing.T) {
	e := newEnv(t, mapping.Config{Brokers: brokers("a", "b"), Policies: map[string]mapping.Policy{
		"short": badPolicy{out: []string{"a"}},
		"alien": badPolicy{out: []string{"a", "zz"}},
	}})
	e.apply(t, mapping.Change{Kind: mapping.KindCreate, Topic: "t", Queues: 2})
	if _, err := e.m.Apply(ctx, mapping.Change{Kind: mapping.KindGrow, Topic: "t", Queues: 1}); !errors.Is(err, mapping.ErrShrink) {
		t.Fatalf("shrink: %v", err)
	}
	if _, err := e.m.Apply(ctx, mapping.Change{Kind: mapping.KindRemap, Topic: "t", Brokers: []string{"nope"}}); !errors.Is(err, mapping.ErrUnknownBroker) {
		t.Fatalf("unknown broker: %v", err)
	}
	for _, pol := range []string{"short", "alien"} {
		_, err := e.m.Apply(ctx, mapping.Change{Kind: mapping.KindRemap, Topic: "t", Policy: pol})
		var pe *mapping.PolicyError
		if !errors.As(err, &pe) || pe.Policy != pol || pe.Source != "plugin bad-plugin" {
			t.Fatalf("policy %s: %v", pol, err)
		}
		if want := "bad-plugin"; !contains(err.Error(), want) {
			t.Fatalf("error %q does not name the plugin", err)
		}
	}
	if _, err := e.m.Apply(ctx, mapping.Change{Kind: mapping.KindRemap, Topic: "t", Policy: "nope"}); !errors.Is(err, mapping.ErrUnknownPolicy) {
		t.Fatalf("unknown policy: %v", err)
	}
	if _, err := e.m.Apply(ctx, mapping.Change{Kind: mapping.KindCreate, Topic: "t", Queues: 2}); !errors.Is(err, mapping.ErrExists) {
		t.Fatalf("create twice: %v", err)
	}
	if _, err := e.m.Apply(ctx, mapping.Change{Kind: mapping.KindDelete, Topic: mapping.ControlTopic}); !errors.Is(err, mapping.ErrReserved) {
		t.Fatalf("delete control: %v", err)
	}
	ti, _ := e.m.Describe(ctx, "t")
	if ti.Topic.Epoch != 1 || ti.Topic.Queues != 2 {
		t.Fatalf("rejected changes changed the topic: %+v", ti.Topic)
	}
}

func contains(s, sub string) bool {
	for i := 0; i+len(sub) <= len(s); i++ {
		if s[i:i+len(sub)] == sub {
			return true
		}
	}
	return false
}

// Scenario 6: concurrent appends during remaps: none lost, none
// duplicated, order kept per producer goroutine.
func TestScenario6ConcurrentAppendsDuringRemap(t *testing.T) {
	e := newEnv(t, mapping.Config{Brokers: brokers("a", "b", "c")})
	e.apply(t, mapping.Change{Kind: mapping.KindCreate, Topic: "t", Queues: 2, Brokers: []string{"a"}})
	var wg sync.WaitGroup
	stop := make(chan struct{})
	type ack struct {
		g, i int
		off  uint64
	}
	acks := make(chan ack, 100000)
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				vc := fmt.Sprintf("t/%d", g%2)
				p, err := e.m.Append(ctx, vc, []wal.Record{{Payload: []byte(fmt.Sprintf("%d/%d", g, i))}})
				if err != nil {
					t.Errorf("append: %v", err)
					return
				}
				acks <- ack{g, i, p[0].Offset}
			}
		}()
	}
	for _, b := range []string{"b", "c", "a", "b"} {
		time.Sleep(15 * time.Millisecond)
		e.apply(t, mapping.Change{Kind: mapping.KindRemap, Topic: "t", Brokers: []string{b}})
	}
	close(stop)
	wg.Wait()
	close(acks)
	n := 0
	for range acks {
		n++
	}
	got := 0
	for q := 0; q < 2; q++ {
		msgs := e.readAll(t, fmt.Sprintf("t/%d", q), 0)
		got += len(msgs)
		last := map[int]int{}
		for _, m := range msgs {
			var g, i int
			fmt.Sscanf(string(m.Payload), "%d/%d", &g, &i)
			if prev, ok := last[g]; ok && i != prev+1 {
				t.Fatalf("queue %d: producer %d went from %d to %d", q, g, prev, i)
			}
			last[g] = i
		}
	}
	if got != n {
		t.Fatalf("acknowledged %d appends, read %d", n, got)
	}
	ti, _ := e.m.Describe(ctx, "t")
	if len(ti.Queues[0].Segments) < 2 {
		t.Fatalf("remaps did not happen: %+v", ti.Queues[0].Segments)
	}
}

// Scenario 7: timestamp lookup returns the first message at or after the
// time, across segments.
func TestScenario7TimestampLookup(t *testing.T) {
	clk := &fakeClock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	e := newEnv(t, mapping.Config{Brokers: brokers("a", "b"), Clock: clk})
	e.apply(t, mapping.Change{Kind: mapping.KindCreate, Topic: "t", Queues: 1, Brokers: []string{"a"}})
	var times []time.Time
	for i := 0; i < 12; i++ {
		if i == 4 || i == 8 {
			b := []string{"b", "a"}[i/4-1]
			e.apply(t, mapping.Change{Kind: mapping.KindRemap, Topic: "t", Brokers: []string{b}})
		}
		clk.Add(time.Second)
		times = append(times, clk.Now())
		e.appendN(t, "t/0", 1, "m")
	}
	for i, at := range times {
		off, err := e.m.OffsetForTime(ctx, "t/0", at)
		if err != nil || off != uint64(i) {
			t.Fatalf("lookup %d: %d %v", i, off, err)
		}
		off, err = e.m.OffsetForTime(ctx, "t/0", at.Add(-500*time.Millisecond))
		if err != nil || off != uint64(i) {
			t.Fatalf("lookup before %d: %d %v", i, off, err)
		}
	}
	if off, _ := e.m.OffsetForTime(ctx, "t/0", times[11].Add(time.Hour)); off != 12 {
		t.Fatalf("lookup after the end: %d", off)
	}
	if off, _ := e.m.OffsetForTime(ctx, "t/0", time.Time{}); off != 0 {
		t.Fatalf("lookup at zero: %d", off)
	}
}

// Scenario 8: retention drops an expired closed segment; min moves; reads
// below min get offset_out_of_range carrying min and max.
func TestScenario8Retention(t *testing.T) {
	clk := &fakeClock{now: time.Now()}
	e := newEnv(t, mapping.Config{Brokers: brokers("a", "b"), Clock: clk})
	e.apply(t, mapping.Change{Kind: mapping.KindCreate, Topic: "t", Queues: 1, Brokers: []string{"a"},
		Retention: &mapping.Retention{MaxAge: time.Hour}})
	e.appendN(t, "t/0", 5, "old")
	e.apply(t, mapping.Change{Kind: mapping.KindRemap, Topic: "t", Brokers: []string{"b"}})
	e.appendN(t, "t/0", 2, "mid")
	if err := e.m.CommitOffset(ctx, "g", "t/0", 1); err != nil {
		t.Fatal(err)
	}
	clk.Add(2 * time.Hour)
	e.appendN(t, "t/0", 3, "new")
	rep, err := e.m.ApplyRetention(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Dropped != 1 || rep.Trimmed != 7 {
		t.Fatalf("report %+v", rep)
	}
	min, max, err := e.m.Bounds(ctx, "t/0")
	if err != nil || min != 7 || max != 10 {
		t.Fatalf("bounds %d %d %v", min, max, err)
	}
	_, err = e.m.Read(ctx, "t/0", 3, 10)
	var re *mapping.RangeError
	if !errors.As(err, &re) || re.Min != 7 || re.Max != 10 || !errors.Is(err, mapping.ErrOutOfRange) {
		t.Fatalf("read below min: %v", err)
	}
	if _, err := e.m.Read(ctx, "t/0", 11, 10); !errors.As(err, &re) {
		t.Fatalf("read above max: %v", err)
	}
	msgs := e.readAll(t, "t/0", 7)
	if len(msgs) != 3 || string(msgs[0].Payload) != "new-0" {
		t.Fatalf("read after retention: %d", len(msgs))
	}
	g, _ := e.m.GroupOffset(ctx, "g", "t/0")
	if !g.Expired || g.Min != 7 {
		t.Fatalf("group offset past retention: %+v", g)
	}
	ti, _ := e.m.Describe(ctx, "t")
	if len(ti.Queues[0].Segments) != 1 {
		t.Fatalf("segments after retention: %+v", ti.Queues[0].Segments)
	}
}

func TestRetentionByBytesAndControl(t *testing.T) {
	e := newEnv(t, mapping.Config{Brokers: brokers("a", "b"), ControlRetention: mapping.Retention{MaxBytes: 1000}})
	e.apply(t, mapping.Change{Kind: mapping.KindCreate, Topic: "t", Queues: 1, Brokers: []string{"a"},
		Retention: &mapping.Retention{MaxBytes: 500}})
	rec := []wal.Record{{Payload: make([]byte, 84)}} // 100 bytes counted
	for i := 0; i < 4; i++ {
		if _, err := e.m.Append(ctx, "t/0", rec); err != nil {
			t.Fatal(err)
		}
	}
	e.apply(t, mapping.Change{Kind: mapping.KindRemap, Topic: "t", Brokers: []string{"b"}})
	for i := 0; i < 3; i++ {
		if _, err := e.m.Append(ctx, "t/0", rec); err != nil {
			t.Fatal(err)
		}
	}
	for i := 0; i < 20; i++ {
		if _, err := e.m.Append(ctx, wal.ControlChannel, rec); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := e.m.ApplyRetention(ctx); err != nil {
		t.Fatal(err)
	}
	if min, max, _ := e.m.Bounds(ctx, "t/0"); min != 2 || max != 7 {
		t.Fatalf("t/0 bounds [%d,%d), want [2,7)", min, max)
	}
	if min, max, _ := e.m.Bounds(ctx, wal.ControlChannel); min != 10 || max != 20 {
		t.Fatalf("control bounds [%d,%d), want [10,20) (the open leader is trimmed too)", min, max)
	}
}

func TestProducerIdempotency(t *testing.T) {
	e := newEnv(t, mapping.Config{Brokers: brokers("a", "b")})
	e.apply(t, mapping.Change{Kind: mapping.KindCreate, Topic: "t", Queues: 1, Brokers: []string{"a"}})
	recs := []wal.Record{{Payload: []byte("a")}, {Payload: []byte("b")}}
	o := mapping.AppendOptions{ProducerID: "p1", Seq: 1}
	p1, dup, err := e.m.AppendOpts(ctx, "t/0", recs, o)
	if err != nil || dup {
		t.Fatal(err, dup)
	}
	e.apply(t, mapping.Change{Kind: mapping.KindRemap, Topic: "t", Brokers: []string{"b"}})
	p2, dup, err := e.m.AppendOpts(ctx, "t/0", recs, o)
	if err != nil || !dup || p2[0].Offset != p1[0].Offset || p2[1].Offset != p1[1].Offset || p2[0].Tick != p1[0].Tick {
		t.Fatalf("retry: %+v dup=%v %v", p2, dup, err)
	}
	if _, _, err := e.m.AppendOpts(ctx, "t/0", recs, mapping.AppendOptions{ProducerID: "p1", Seq: 0}); !errors.Is(err, mapping.ErrSequence) {
		t.Fatalf("old seq: %v", err)
	}
	p3, dup, err := e.m.AppendOpts(ctx, "t/0", recs, mapping.AppendOptions{ProducerID: "p1", Seq: 2})
	if err != nil || dup || p3[0].Offset != 2 {
		t.Fatalf("next seq: %+v %v", p3, err)
	}
	// The state survives a restart (it is committed with the entries).
	e2 := reopen(t, e)
	p4, dup, err := e2.m.AppendOpts(ctx, "t/0", recs, mapping.AppendOptions{ProducerID: "p1", Seq: 2})
	if err != nil || !dup || p4[0].Offset != 2 {
		t.Fatalf("retry after restart: %+v %v %v", p4, dup, err)
	}
	if _, max, _ := e2.m.Bounds(ctx, "t/0"); max != 4 {
		t.Fatalf("max %d, want 4", max)
	}
}

func reopen(t *testing.T, e *env) *env {
	t.Helper()
	e.db.Close()
	return openEnv(t, e.dir, mapping.Config{Brokers: e.m.Brokers()})
}

func TestInvariantViolationOnLoad(t *testing.T) {
	e := newEnv(t, mapping.Config{Brokers: brokers("a", "b")})
	e.apply(t, mapping.Change{Kind: mapping.KindCreate, Topic: "t", Queues: 2})
	// Corrupt queue 1: a second open segment.
	var v []byte
	key := append([]byte("mp/q/t\x00"), 0, 0, 0, 1)
	_ = e.db.View(ctx, func(r catalog.Reader) error { v, _, _ = r.Get(key); return nil })
	bad := []byte(string(v[:len(v)-2]) + `,{"gen":2,"broker":"b","queue_id":999,"logic_offset":0,"start_offset":0}]}`)
	if _, err := e.db.Commit(ctx, &catalog.Batch{Ops: []catalog.Op{{Key: key, Value: bad}}}); err != nil {
		t.Fatal(err)
	}
	e.db.Close()
	o := catalog.DefaultOptions(e.dir)
	o.GCInterval = 0
	db, err := catalog.Open(o)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	w, _ := wal.Open(ctx, wal.Config{Store: db})
	_, err = mapping.Open(ctx, mapping.Config{Store: db, WAL: w, Brokers: brokers("a", "b")})
	var ie *mapping.InvariantError
	if !errors.As(err, &ie) || ie.Topic != "t" || ie.Queue != 1 || ie.Segment != 0 {
		t.Fatalf("load of a corrupt mapping: %v", err)
	}
}

func TestDeleteTopic(t *testing.T) {
	e := newEnv(t, mapping.Config{Brokers: brokers("a", "b")})
	e.apply(t, mapping.Change{Kind: mapping.KindCreate, Topic: "t", Queues: 2, Brokers: []string{"a"}})
	e.appendN(t, "t/0", 3, "x")
	e.apply(t, mapping.Change{Kind: mapping.KindRemap, Topic: "t", Brokers: []string{"b"}})
	e.appendN(t, "t/0", 3, "y")
	e.apply(t, mapping.Change{Kind: mapping.KindDelete, Topic: "t"})
	if err := e.m.Check(ctx, "t/0"); !errors.Is(err, wal.ErrNoChannel) {
		t.Fatalf("deleted topic: %v", err)
	}
	if _, err := e.m.Append(ctx, "t/0", []wal.Record{{Payload: []byte("z")}}); !errors.Is(err, wal.ErrNoChannel) {
		t.Fatalf("append to deleted: %v", err)
	}
	for _, b := range []string{"a/", "b/"} {
		qs, _ := e.w.Queues(ctx, b)
		if b == "a/" && len(qs) != 1 { // the control topic's queue
			t.Fatalf("physical queues left on a: %v", qs)
		}
		if b == "b/" && len(qs) != 0 {
			t.Fatalf("physical queues left on b: %v", qs)
		}
	}
	// The name can be used again, from offset 0.
	e.apply(t, mapping.Change{Kind: mapping.KindCreate, Topic: "t", Queues: 1})
	if p := e.appendN(t, "t/0", 1, "n"); p[0].Offset != 0 {
		t.Fatalf("recreated topic starts at %d", p[0].Offset)
	}
}

func TestWaitFollowsRemap(t *testing.T) {
	e := newEnv(t, mapping.Config{Brokers: brokers("a", "b")})
	e.apply(t, mapping.Change{Kind: mapping.KindCreate, Topic: "t", Queues: 1, Brokers: []string{"a"}})
	e.appendN(t, "t/0", 2, "x")
	done := make(chan error, 1)
	go func() { done <- e.m.Wait(ctx, "t/0", 2) }()
	time.Sleep(20 * time.Millisecond)
	e.apply(t, mapping.Change{Kind: mapping.KindRemap, Topic: "t", Brokers: []string{"b"}})
	time.Sleep(20 * time.Millisecond)
	e.appendN(t, "t/0", 1, "y")
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("long-poll did not follow the remap")
	}
}

func TestDirectResolverCompatibleControl(t *testing.T) {
	e := newEnv(t, mapping.Config{})
	var r wal.Resolver = e.m
	if err := r.Check(ctx, wal.ControlChannel); err != nil {
		t.Fatal(err)
	}
	p, err := r.Append(ctx, wal.ControlChannel, []wal.Record{{Payload: []byte("c")}})
	if err != nil || p[0].Offset != 0 || p[0].Tick == 0 {
		t.Fatalf("%+v %v", p, err)
	}
	for _, bad := range []string{"", "x", "t/", "/0", "t/-1", "t/01", "nope/0"} {
		if err := r.Check(ctx, bad); !errors.Is(err, wal.ErrNoChannel) {
			t.Fatalf("Check(%q) = %v", bad, err)
		}
	}
}

// A pipelining producer: several appends in flight, then retries of any of
// the last ProducerWindow seqs (also concurrently, also after a restart)
// are duplicates answered with their original offsets; older seqs are a
// clear ErrSequence; nothing is appended twice.
func TestProducerWindow(t *testing.T) {
	e := newEnv(t, mapping.Config{Brokers: brokers("a")})
	e.apply(t, mapping.Change{Kind: mapping.KindCreate, Topic: "t", Queues: 1, Brokers: []string{"a"}})
	const n = 40
	first := map[uint64]uint64{}
	for s := uint64(1); s <= n; s++ {
		recs := make([]wal.Record, 1+s%3)
		pos, dup, err := e.m.AppendOpts(ctx, "t/0", recs, mapping.AppendOptions{ProducerID: "p", Seq: s})
		if err != nil || dup || len(pos) != len(recs) {
			t.Fatalf("seq %d: %+v %v %v", s, pos, dup, err)
		}
		first[s] = pos[0].Offset
	}
	_, max, _ := e.m.Bounds(ctx, "t/0")
	check := func(m *mapping.Mapping) {
		t.Helper()
		var wg sync.WaitGroup
		errs := make(chan error, n*2)
		for s := uint64(n - mapping.ProducerWindow + 1); s <= n; s++ {
			for k := 0; k < 2; k++ {
				wg.Add(1)
				go func(s uint64) {
					defer wg.Done()
					pos, dup, err := m.AppendOpts(ctx, "t/0", make([]wal.Record, 1+s%3), mapping.AppendOptions{ProducerID: "p", Seq: s})
					if err != nil || !dup || len(pos) != int(1+s%3) || pos[0].Offset != first[s] {
						errs <- fmt.Errorf("retry of seq %d: %+v dup=%v %v (first offset was %d)", s, pos, dup, err, first[s])
					}
				}(s)
			}
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Error(err)
		}
		_, _, err := m.AppendOpts(ctx, "t/0", []wal.Record{{}}, mapping.AppendOptions{ProducerID: "p", Seq: n - mapping.ProducerWindow})
		if !errors.Is(err, mapping.ErrSequence) || !strings.Contains(err.Error(), "older than the last 16") {
			t.Fatalf("seq just outside the window: %v", err)
		}
		if _, m2, _ := m.Bounds(ctx, "t/0"); m2 != max {
			t.Fatalf("retries appended: max %d, want %d", m2, max)
		}
	}
	check(e.m)
	e = reopen(t, e)
	check(e.m)
	// The window is per producer and logic queue: another producer starts
	// fresh, and a new seq still appends.
	if _, dup, err := e.m.AppendOpts(ctx, "t/0", []wal.Record{{}}, mapping.AppendOptions{ProducerID: "q", Seq: 1}); err != nil || dup {
		t.Fatalf("other producer: %v %v", dup, err)
	}
	if pos, dup, err := e.m.AppendOpts(ctx, "t/0", []wal.Record{{}}, mapping.AppendOptions{ProducerID: "p", Seq: n + 5}); err != nil || dup || pos[0].Offset != max+1 {
		t.Fatalf("next seq: %+v %v %v", pos, dup, err)
	}
	// A seq inside the window's range that was never appended is not a
	// retry: out of order.
	if _, _, err := e.m.AppendOpts(ctx, "t/0", []wal.Record{{}}, mapping.AppendOptions{ProducerID: "p", Seq: n + 2}); !errors.Is(err, mapping.ErrSequence) {
		t.Fatalf("gap seq: %v", err)
	}
}

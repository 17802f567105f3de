package jswal_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/goleak"

	"github.com/hostd-dev/hostd/builtin/broadcast"
	"github.com/hostd-dev/hostd/internal/natstest"
	"github.com/hostd-dev/hostd/runtime/catalog"
	"github.com/hostd-dev/hostd/runtime/wal"
	"github.com/hostd-dev/hostd/runtime/wal/jswal"
	"github.com/hostd-dev/hostd/runtime/wal/waltest"
	"github.com/hostd-dev/hostd/sdk/abi"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var prefixN atomic.Int64

// open opens a log on c with its own stream prefix (so each caller sees
// an empty log), closed by t.Cleanup.
func open(t *testing.T, c *natstest.Cluster, o jswal.Options) *jswal.Log {
	t.Helper()
	if o.Conn == nil && o.URL == "" {
		o.Conn = c.Conn(t)
	}
	if o.StreamPrefix == "" {
		o.StreamPrefix = fmt.Sprintf("T%d", prefixN.Add(1))
	}
	l, err := jswal.Open(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

// waitPlacement waits until the cluster can place a stream with replicas
// and tags (a fresh cluster has a meta leader before every peer is
// known: creates fail with "no suitable peers" meanwhile).
func waitPlacement(t *testing.T, c *natstest.Cluster, replicas int, tags []string) {
	t.Helper()
	nc := c.Conn(t)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		cfg := jetstream.StreamConfig{Name: "PROBE", Subjects: []string{"probe"}, Replicas: replicas, Storage: jetstream.MemoryStorage}
		if len(tags) > 0 {
			cfg.Placement = &jetstream.Placement{Tags: tags}
		}
		_, err := js.CreateStream(ctx, cfg)
		if err == nil {
			err = js.DeleteStream(ctx, "PROBE")
		}
		cancel()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("cluster cannot place R%d %v streams after 30 s: %v", replicas, tags, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// TestConformance runs the backend-neutral suite on one nats-server in the
// recommended setup: file storage, sync_interval always.
func TestConformance(t *testing.T) {
	c := natstest.Start(t, natstest.Options{SyncAlways: true})
	waltest.Run(t, func(t *testing.T) wal.Log { return open(t, c, jswal.Options{}) })
}

func TestOptionsValidate(t *testing.T) {
	err := jswal.Options{Replicas: 2, Storage: "disk", StreamPrefix: "a.b", MaxRecordBytes: -1}.Validate()
	for _, want := range []string{"wal.jetstream.url", "wal.jetstream.replicas", "wal.jetstream.storage", "wal.jetstream.stream_prefix", "wal.max_record_bytes"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Validate: %v, want a problem with %s", err, want)
		}
	}
}

// TestMaxPayloadRefusedAtConnect: a server whose max_payload cannot carry
// the largest record plus its envelope is refused at Open with a typed
// error, before anything is appended.
func TestMaxPayloadRefusedAtConnect(t *testing.T) {
	c := natstest.Start(t, natstest.Options{MaxPayload: 64 << 10})
	_, err := jswal.Open(context.Background(), jswal.Options{URL: c.URL()})
	var pe *jswal.PayloadError
	if !errors.As(err, &pe) || pe.ServerMax != 64<<10 || pe.Need != 1<<20-4<<10+jswal.Envelope {
		t.Fatalf("Open: %v, want *PayloadError", err)
	}
	if !strings.Contains(err.Error(), "max_payload") {
		t.Fatalf("error does not say what to change: %v", err)
	}
	// A record limit that fits is accepted.
	l, err := jswal.Open(context.Background(), jswal.Options{URL: c.URL(), MaxRecordBytes: 32 << 10})
	if err != nil {
		t.Fatal(err)
	}
	l.Close()
}

// TestOldLeaderFenced: writer 1 (term 1) appends; writer 2 takes over
// with term 2 and fences the queue; writer 1's late append fails with a
// fenced error and nothing of it is stored, while writer 2 goes on.
func TestOldLeaderFenced(t *testing.T) {
	c := natstest.Start(t, natstest.Options{SyncAlways: true})
	ctx := ctxT(t)
	var fencedCalls atomic.Int32
	old := open(t, c, jswal.Options{Term: 1, StreamPrefix: "F", OnFenced: func() { fencedCalls.Add(1) }})
	if err := old.Create(ctx, "t/0"); err != nil {
		t.Fatal(err)
	}
	if _, err := old.Append(ctx, "t/0", []wal.Record{{Payload: []byte("a")}}); err != nil {
		t.Fatal(err)
	}
	nw := open(t, c, jswal.Options{Term: 1, StreamPrefix: "F"})
	if err := nw.Fence(ctx, "t/0", 2); err != nil {
		t.Fatal(err)
	}
	_, err := old.Append(ctx, "t/0", []wal.Record{{Payload: []byte("late")}})
	var fe *jswal.FencedError
	if !errors.As(err, &fe) || !errors.Is(err, jswal.ErrFenced) || fe.Term != 1 || fe.By != 2 {
		t.Fatalf("old leader's append: %v, want *FencedError term 1 by 2", err)
	}
	// A fresh writer of the old term is refused too (it reads the tail).
	stale := open(t, c, jswal.Options{Term: 1, StreamPrefix: "F"})
	if _, err := stale.Append(ctx, "t/0", []wal.Record{{Payload: []byte("stale")}}); !errors.Is(err, jswal.ErrFenced) {
		t.Fatalf("stale writer: %v, want fenced", err)
	}
	if err := old.Fence(ctx, "t/0", 1); !errors.Is(err, jswal.ErrFenced) {
		t.Fatalf("fence with an older term: %v, want fenced", err)
	}
	if n := fencedCalls.Load(); n != 1 {
		t.Fatalf("OnFenced called %d times after two refusals, want once", n)
	}
	ents, err := nw.Append(ctx, "t/0", []wal.Record{{Payload: []byte("b")}})
	if err != nil {
		t.Fatal(err)
	}
	if ents[0].Offset != 3 { // fence of term 1, a, fence of term 2, b
		t.Fatalf("new leader's append at %d, want 3", ents[0].Offset)
	}
	got, err := nw.Read(ctx, "t/0", 0, 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || string(got[0].Payload) != "a" || got[0].Offset != 1 || string(got[1].Payload) != "b" || got[1].Offset != 3 {
		t.Fatalf("read %+v: want a@1, b@3 (the fences skipped)", got)
	}
	// A full trim carries the fence forward (a copy at offset 4), so it
	// outlives retention.
	if mn, err := nw.Trim(ctx, "t/0", 100); err != nil || mn != 4 {
		t.Fatalf("Trim = %d, %v; want 4", mn, err)
	}
	if b, err := nw.Bounds(ctx, "t/0"); err != nil || b.Min != 4 || b.Max != 5 {
		t.Fatalf("bounds after a full trim %+v, %v; want [4, 5): the fence's copy", b, err)
	}
	if ents, err := nw.Read(ctx, "t/0", 4, 10); err != nil || len(ents) != 0 {
		t.Fatalf("read after trim = %v, %v; want nothing (the fence is skipped)", ents, err)
	}
	if _, err := stale.Append(ctx, "t/0", []wal.Record{{Payload: []byte("stale")}}); !errors.Is(err, jswal.ErrFenced) {
		t.Fatalf("stale writer after trim: %v, want fenced", err)
	}
}

// TestLazyFence: a writer with a term fences each queue before its first
// append there, so an older writer that still holds a cached tail fails
// even on queues the new one only appends to (never fenced explicitly).
func TestLazyFence(t *testing.T) {
	c := natstest.Start(t, natstest.Options{SyncAlways: true})
	ctx := ctxT(t)
	old := open(t, c, jswal.Options{Term: 3, StreamPrefix: "L"})
	if err := old.Create(ctx, "q"); err != nil {
		t.Fatal(err)
	}
	if _, err := old.Append(ctx, "q", []wal.Record{{Payload: []byte("a")}}); err != nil {
		t.Fatal(err)
	}
	nw := open(t, c, jswal.Options{Term: 4, StreamPrefix: "L"})
	if _, err := nw.Append(ctx, "q", []wal.Record{{Payload: []byte("b")}}); err != nil {
		t.Fatal(err)
	}
	if _, err := old.Append(ctx, "q", []wal.Record{{Payload: []byte("late")}}); !errors.Is(err, jswal.ErrFenced) {
		t.Fatalf("old writer: %v, want fenced", err)
	}
}

// TestReconcileAmbiguousPublish: a publish whose outcome the writer never
// learned (here: stored behind its back with the same Msg-Id, as a lost
// ack leaves it) is found from the low-water offset and not appended
// again — also after JetStream's duplicate window, which reconcile does
// not rely on.
func TestReconcileAmbiguousPublish(t *testing.T) {
	c := natstest.Start(t, natstest.Options{SyncAlways: true})
	ctx := ctxT(t)
	l := open(t, c, jswal.Options{StreamPrefix: "R", Duplicates: 100 * time.Millisecond})
	if err := l.Create(ctx, "t/1"); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Append(ctx, "t/1", []wal.Record{{Payload: []byte("x")}}); err != nil {
		t.Fatal(err)
	}
	low, err := l.NextHint(ctx, "t/1")
	if err != nil {
		t.Fatal(err)
	}
	recs := []wal.Record{
		{Payload: []byte("m1"), ID: "41/t/1", Kind: wal.KindBroadcast},
		{Payload: []byte("m2"), ID: "42/t/1", Kind: wal.KindBroadcast},
	}
	// The first record reached the stream, its ack was lost.
	if _, err := l.Append(ctx, "t/1", recs[:1]); err != nil {
		t.Fatal(err)
	}
	// Within the duplicate window JetStream itself drops the copy.
	ents, err := l.Append(ctx, "t/1", recs[:1])
	if err != nil || ents[0].Offset != 1 {
		t.Fatalf("duplicate within the window: %v, %v; want offset 1", ents, err)
	}
	time.Sleep(300 * time.Millisecond) // past the duplicate window
	ents, err = wal.AppendOnce(ctx, l, "t/1", low, recs)
	if err != nil {
		t.Fatal(err)
	}
	if ents[0].Offset != 1 || ents[1].Offset != 2 {
		t.Fatalf("AppendOnce offsets %d, %d; want 1, 2", ents[0].Offset, ents[1].Offset)
	}
	if mx, _ := l.Max(ctx, "t/1"); mx != 3 {
		t.Fatalf("Max = %d, want 3: a record was appended twice", mx)
	}
}

// TestProducerHeaders: every record carries the writer's term, producer
// id and sequence and its ID as Nats-Msg-Id, so producer state can be
// rebuilt from a stream's tail.
func TestProducerHeaders(t *testing.T) {
	c := natstest.Start(t, natstest.Options{SyncAlways: true})
	ctx := ctxT(t)
	nc := c.Conn(t)
	l := open(t, c, jswal.Options{Conn: nc, StreamPrefix: "P", ProducerID: "replica-a", Term: 7})
	if err := l.Create(ctx, "p"); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Append(ctx, "p", []wal.Record{{Payload: []byte("x"), ID: "1/p"}}); err != nil {
		t.Fatal(err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	names, err := streamNames(ctx, js, "P")
	if err != nil || len(names) != 1 {
		t.Fatalf("streams: %v, %v", names, err)
	}
	s, err := js.Stream(ctx, names[0])
	if err != nil {
		t.Fatal(err)
	}
	// offset 0 is the lazy fence of term 7, offset 1 the record.
	m, err := s.GetMsg(ctx, 2)
	if err != nil {
		t.Fatal(err)
	}
	h := m.Header
	if h.Get("Hostd-Producer") != "replica-a" || h.Get("Hostd-Producer-Seq") == "" || h.Get("Hostd-Term") != "7" || h.Get(nats.MsgIdHdr) != "1/p" {
		t.Fatalf("headers %v", h)
	}
}

func streamNames(ctx context.Context, js jetstream.JetStream, prefix string) ([]string, error) {
	var out []string
	l := js.StreamNames(ctx)
	for n := range l.Name() {
		if strings.HasPrefix(n, prefix+"_") {
			out = append(out, n)
		}
	}
	return out, l.Err()
}

// TestPlacementTags: on a 3-server cluster whose servers carry zone tags,
// R1 streams land on the server whose tag the options name.
func TestPlacementTags(t *testing.T) {
	c := natstest.Start(t, natstest.Options{Servers: 3, SyncAlways: true, Tags: [][]string{{"az:a"}, {"az:b"}, {"az:c"}}})
	for _, zone := range []string{"az:a", "az:b", "az:c"} {
		waitPlacement(t, c, 1, []string{zone})
	}
	ctx := ctxT(t)
	nc := c.Conn(t)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	for i, zone := range []string{"az:a", "az:b", "az:c"} {
		prefix := fmt.Sprintf("Z%d", i)
		l := open(t, c, jswal.Options{Conn: nc, StreamPrefix: prefix, Placement: []string{zone}})
		if err := l.Create(ctx, "topic/0"); err != nil {
			t.Fatal(err)
		}
		if _, err := l.Append(ctx, "topic/0", []wal.Record{{Payload: []byte("x")}}); err != nil {
			t.Fatal(err)
		}
		names, err := streamNames(ctx, js, prefix)
		if err != nil || len(names) != 1 {
			t.Fatalf("streams: %v, %v", names, err)
		}
		s, err := js.Stream(ctx, names[0])
		if err != nil {
			t.Fatal(err)
		}
		if got, want := s.CachedInfo().Cluster.Leader, fmt.Sprintf("n%d", i); got != want {
			t.Fatalf("stream with placement %s on %s, want %s", zone, got, want)
		}
	}
	// Per queue, as a broker's labels would place it.
	l := open(t, c, jswal.Options{Conn: nc, StreamPrefix: "ZQ"})
	if err := l.CreatePlaced(ctx, "topic/1", []string{"az:c"}); err != nil {
		t.Fatal(err)
	}
	names, err := streamNames(ctx, js, "ZQ")
	if err != nil || len(names) != 1 {
		t.Fatalf("streams: %v, %v", names, err)
	}
	s, err := js.Stream(ctx, names[0])
	if err != nil {
		t.Fatal(err)
	}
	if got := s.CachedInfo().Cluster.Leader; got != "n2" {
		t.Fatalf("queue placed on az:c is on %s, want n2", got)
	}
	if err := l.CreatePlaced(ctx, "topic/2", []string{"az:nowhere"}); err == nil {
		t.Fatal("a placement no server matches was accepted")
	}
}

// TestLostAckNotAppendedTwice: the ack of a stored publish is lost (the
// writer sees a timeout). The retry, with the same expected sequence,
// meets either JetStream's duplicate (a record with an ID) or a wrong
// sequence; then the writer reads the expected position, recognizes its
// own message by producer id and sequence, and reports that offset.
// Either way the record is in the queue once.
func TestLostAckNotAppendedTwice(t *testing.T) {
	c := natstest.Start(t, natstest.Options{SyncAlways: true})
	ctx := ctxT(t)
	l := open(t, c, jswal.Options{StreamPrefix: "A"})
	if err := l.Create(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	var dropped atomic.Int64
	jswal.SetDropAck(func(m *nats.Msg) bool { return dropped.Add(1) == 1 })
	t.Cleanup(func() { jswal.SetDropAck(nil) })
	for i, r := range []wal.Record{{Payload: []byte("no id")}, {Payload: []byte("with id"), ID: "5/a"}} {
		dropped.Store(0)
		ents, err := l.Append(ctx, "a", []wal.Record{r})
		if err != nil {
			t.Fatalf("record %d: %v", i, err)
		}
		if ents[0].Offset != uint64(i) {
			t.Fatalf("record %d at %d", i, ents[0].Offset)
		}
		if mx, _ := l.Max(ctx, "a"); mx != uint64(i+1) {
			t.Fatalf("after record %d Max = %d: appended twice", i, mx)
		}
	}
}

// TestWaitSkipsFences: a fence record at the offset a consumer waits for
// does not wake it; the next data record does.
func TestWaitSkipsFences(t *testing.T) {
	c := natstest.Start(t, natstest.Options{SyncAlways: true})
	ctx := ctxT(t)
	l := open(t, c, jswal.Options{StreamPrefix: "W", PollInterval: 20 * time.Millisecond})
	if err := l.Create(ctx, "w"); err != nil {
		t.Fatal(err)
	}
	if err := l.Fence(ctx, "w", 1); err != nil {
		t.Fatal(err)
	}
	short, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	if err := l.Wait(short, "w", 0); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Wait over a fence: %v, want to block", err)
	}
	done := make(chan error, 1)
	go func() { done <- l.Wait(ctx, "w", 0) }()
	if _, err := l.Append(ctx, "w", []wal.Record{{Payload: []byte("x")}}); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if ents, err := l.Read(ctx, "w", 0, 10); err != nil || len(ents) != 1 || ents[0].Offset != 1 {
		t.Fatalf("read = %v, %v; want the record at 1", ents, err)
	}
}

// TestConformanceR3 runs the suite on the setup docs/jetstream-wal.md
// recommends for production: a 3-server JetStream cluster, R3 file
// streams, sync_interval always.
func TestConformanceR3(t *testing.T) {
	if testing.Short() {
		t.Skip("a 3-server cluster: not in -short")
	}
	c := natstest.Start(t, natstest.Options{Servers: 3, SyncAlways: true})
	waitPlacement(t, c, 3, nil)
	waltest.Run(t, func(t *testing.T) wal.Log { return open(t, c, jswal.Options{Replicas: 3}) })
}

// BenchmarkRead256 reads 256 records in one Read (batched direct get).
func BenchmarkRead256(b *testing.B) {
	c := natstest.Start(b, natstest.Options{})
	l, err := jswal.Open(context.Background(), jswal.Options{URL: c.URL(), Storage: jswal.Memory})
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	ctx := context.Background()
	if err := l.Create(ctx, "r"); err != nil {
		b.Fatal(err)
	}
	recs := make([]wal.Record, 256)
	for i := range recs {
		recs[i] = wal.Record{Payload: make([]byte, 128)}
	}
	if _, err := l.Append(ctx, "r", recs); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for range b.N {
		ents, err := l.Read(ctx, "r", 0, 256)
		if err != nil || len(ents) != 256 {
			b.Fatalf("read %d, %v", len(ents), err)
		}
	}
}

// TestFenceRace: an old leader (term 1) appends without pause — single
// records, or batches of 3 (published at once) — while a new leader
// (term 2) takes over the queue and appends. Once the term-2 fence is in
// the queue no term-1 record follows it; the old leader stops with
// ErrFenced; every term-1 append it saw succeed is stored.
func TestFenceRace(t *testing.T) {
	for _, batch := range []int{1, 3} {
		t.Run(fmt.Sprintf("batch%d", batch), func(t *testing.T) { fenceRace(t, batch) })
	}
}

func fenceRace(t *testing.T, batch int) {
	c := natstest.Start(t, natstest.Options{SyncAlways: true})
	ctx := ctxT(t)
	old := open(t, c, jswal.Options{Term: 1, StreamPrefix: "X"})
	nw := open(t, c, jswal.Options{Term: 1, StreamPrefix: "X"})
	if err := old.Create(ctx, "x"); err != nil {
		t.Fatal(err)
	}
	oldDone := make(chan error, 1)
	var oldOK atomic.Int64
	go func() {
		for i := 0; ; i++ {
			recs := make([]wal.Record, batch)
			for k := range recs {
				recs[k] = wal.Record{Payload: []byte(fmt.Sprintf("t1-%d-%d", i, k))}
			}
			_, err := old.Append(ctx, "x", recs)
			if err != nil {
				oldDone <- err
				return
			}
			oldOK.Add(int64(batch))
		}
	}()
	for oldOK.Load() < 5 {
		time.Sleep(time.Millisecond)
	}
	if err := nw.Fence(ctx, "x", 2); err != nil {
		t.Fatal(err)
	}
	fenceAt, err := nw.NextHint(ctx, "x") // the fence is the last record: offset fenceAt-1
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 5; i++ {
		if _, err := nw.Append(ctx, "x", []wal.Record{{Payload: []byte(fmt.Sprintf("t2-%d", i))}}); err != nil {
			t.Fatal(err)
		}
	}
	select {
	case err := <-oldDone:
		if !errors.Is(err, jswal.ErrFenced) {
			t.Fatalf("old leader stopped with %v, want ErrFenced", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("old leader still appending after the fence")
	}
	ents, err := nw.Read(ctx, "x", 0, 10000)
	if err != nil {
		t.Fatal(err)
	}
	n1 := 0
	for _, e := range ents {
		p := string(e.Payload)
		if strings.HasPrefix(p, "t1-") {
			n1++
			if e.Offset >= fenceAt {
				t.Fatalf("old leader's %q at %d, after the fence at %d", p, e.Offset, fenceAt-1)
			}
		}
	}
	// A batch cut by the fence leaves its stored prefix (before the fence).
	if int64(n1) < oldOK.Load() || int64(n1) >= oldOK.Load()+int64(batch) {
		t.Fatalf("%d term-1 records stored, old leader saw %d succeed (batch %d)", n1, oldOK.Load(), batch)
	}
}

// noLocks grants every key: this test is about the queues, not locking.
type noLocks struct{}

func (noLocks) Lock(context.Context, []abi.ResourceKey) (broadcast.Guard, error) {
	return release{}, nil
}
func (noLocks) TryLock([]abi.ResourceKey) (broadcast.Guard, error) { return release{}, nil }

type release struct{}

func (release) Release() {}

// TestBroadcastEngineOnJetStream: the broadcast engine, unchanged, runs
// on JetStream queues through wal.LogDirect: a broadcast to two vchannels
// lands once on each (and on the control channel), every record with its
// broadcast id + vchannel as Nats-Msg-Id.
func TestBroadcastEngineOnJetStream(t *testing.T) {
	c := natstest.Start(t, natstest.Options{SyncAlways: true})
	ctx := ctxT(t)
	o := catalog.DefaultOptions(t.TempDir())
	o.GCInterval = 0
	st, err := catalog.Open(o)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	l := open(t, c, jswal.Options{Term: 1, StreamPrefix: "E"})
	for _, q := range []string{"t/0", "t/1"} {
		if err := l.Create(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	res, err := wal.NewLogDirect(ctx, l)
	if err != nil {
		t.Fatal(err)
	}
	e, err := broadcast.New(broadcast.Options{Store: st, Locker: noLocks{}, Channels: broadcast.ResolverChannels{R: res},
		Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	if err := e.Register(broadcast.NoopType, broadcast.Noop{}, broadcast.TypeOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := e.Start(ctx); err != nil {
		t.Fatal(err)
	}
	r, err := e.Submit(ctx, &broadcast.Request{Message: broadcast.Message{Type: broadcast.NoopType, Payload: []byte("hi")},
		VChannels: []string{"t/0", "t/1"}, Wait: broadcast.WaitDone})
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Appends) != 3 {
		t.Fatalf("result %+v: want appends to 3 vchannels", r)
	}
	for _, vc := range []string{wal.ControlChannel, "t/0", "t/1"} {
		ents, err := l.Read(ctx, vc, 0, 100)
		if err != nil {
			t.Fatal(err)
		}
		want := fmt.Sprintf("%d/%s", r.ID, vc)
		n := 0
		for _, e := range ents {
			if e.ID == want {
				n++
			}
		}
		if n != 1 {
			t.Fatalf("%s holds %d records with ID %q, want 1 (entries %+v)", vc, n, want, ents)
		}
	}
}

// TestBatchPipelinedLostAck: a batch is published at once, each record
// expecting its predecessor's sequence. The ack of the middle record is
// lost; its position (the only one it can have) shows it stored, so the
// batch is stored once, in order, and the next append goes on after it.
func TestBatchPipelinedLostAck(t *testing.T) {
	c := natstest.Start(t, natstest.Options{SyncAlways: true})
	ctx := ctxT(t)
	l := open(t, c, jswal.Options{StreamPrefix: "BP", Term: 2})
	if err := l.Create(ctx, "b"); err != nil {
		t.Fatal(err)
	}
	var n atomic.Int64
	jswal.SetDropAck(func(m *nats.Msg) bool { return string(m.Data[len(m.Data)-2:]) == "r1" && n.Add(1) == 1 })
	t.Cleanup(func() { jswal.SetDropAck(nil) })
	recs := []wal.Record{{Payload: []byte("r0")}, {Payload: []byte("r1"), ID: "x/1"}, {Payload: []byte("r2")}}
	ents, err := l.Append(ctx, "b", recs)
	if err != nil {
		t.Fatal(err)
	}
	// offset 0 is the term fence.
	for i, e := range ents {
		if e.Offset != uint64(i+1) {
			t.Fatalf("record %d at %d, want %d", i, e.Offset, i+1)
		}
	}
	more, err := l.Append(ctx, "b", []wal.Record{{Payload: []byte("r3")}, {Payload: []byte("r4")}})
	if err != nil || more[0].Offset != 4 || more[1].Offset != 5 {
		t.Fatalf("next batch %v, %v; want offsets 4, 5", more, err)
	}
	got, err := l.Read(ctx, "b", 0, 100)
	if err != nil || len(got) != 5 {
		t.Fatalf("read %d entries, %v; want 5", len(got), err)
	}
	for i, e := range got {
		if want := fmt.Sprintf("r%d", i); string(e.Payload) != want {
			t.Fatalf("entry %d is %q, want %q", i, e.Payload, want)
		}
	}
	if n.Load() != 1 {
		t.Fatalf("the ack was dropped %d times, want 1", n.Load())
	}
}

// TestBatchDuplicateInTheMiddle: a record of a batch whose ID JetStream
// still remembers is not stored again; the records after it are, right
// after the queue's real tail.
func TestBatchDuplicateInTheMiddle(t *testing.T) {
	c := natstest.Start(t, natstest.Options{SyncAlways: true})
	ctx := ctxT(t)
	l := open(t, c, jswal.Options{StreamPrefix: "BD"})
	if err := l.Create(ctx, "d"); err != nil {
		t.Fatal(err)
	}
	first, err := l.Append(ctx, "d", []wal.Record{{Payload: []byte("a"), ID: "a"}})
	if err != nil {
		t.Fatal(err)
	}
	ents, err := l.Append(ctx, "d", []wal.Record{{Payload: []byte("b"), ID: "b"}, {Payload: []byte("a"), ID: "a"}, {Payload: []byte("c"), ID: "c"}})
	if err != nil {
		t.Fatal(err)
	}
	if ents[0].Offset != 1 || ents[1].Offset != first[0].Offset || ents[2].Offset != 2 {
		t.Fatalf("offsets %d %d %d, want 1 %d 2", ents[0].Offset, ents[1].Offset, ents[2].Offset, first[0].Offset)
	}
	if mx, _ := l.Max(ctx, "d"); mx != 3 {
		t.Fatalf("Max %d, want 3", mx)
	}
}

// BenchmarkAppendBatch64 appends 64 records of 128 bytes to one queue
// (file storage, sync_interval always): as one batch (its records are
// published at once, each expecting its predecessor's sequence) and, for
// comparison in the same run, as 64 single-record appends.
func BenchmarkAppendBatch64(b *testing.B) {
	c := natstest.Start(b, natstest.Options{SyncAlways: true})
	l, err := jswal.Open(context.Background(), jswal.Options{URL: c.URL()})
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	ctx := context.Background()
	if err := l.Create(ctx, "b"); err != nil {
		b.Fatal(err)
	}
	recs := make([]wal.Record, 64)
	for i := range recs {
		recs[i] = wal.Record{Payload: make([]byte, 128)}
	}
	b.Run("batch", func(b *testing.B) {
		for range b.N {
			if _, err := l.Append(ctx, "b", recs); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(b.N*64)/b.Elapsed().Seconds(), "records/s")
	})
	b.Run("one-by-one", func(b *testing.B) {
		for range b.N {
			for i := range recs {
				if _, err := l.Append(ctx, "b", recs[i:i+1]); err != nil {
					b.Fatal(err)
				}
			}
		}
		b.ReportMetric(float64(b.N*64)/b.Elapsed().Seconds(), "records/s")
	})
}

// aheadClock is the wall clock plus an offset.
type aheadClock struct{ d time.Duration }

func (c aheadClock) Now() time.Time                         { return time.Now().Add(c.d) }
func (c aheadClock) After(d time.Duration) <-chan time.Time { return time.After(d) }

// TestTicksAboveAnotherWritersClock: a writer whose clock is an hour
// behind the queue's last tick (written by a writer whose clock ran ahead)
// still appends ticks above it, so ticks increase along every queue.
func TestTicksAboveAnotherWritersClock(t *testing.T) {
	c := natstest.Start(t, natstest.Options{})
	ctx := ctxT(t)
	a := open(t, c, jswal.Options{StreamPrefix: "TK", Storage: jswal.Memory, Clock: aheadClock{time.Hour}})
	if err := a.Create(ctx, "k"); err != nil {
		t.Fatal(err)
	}
	first, err := a.Append(ctx, "k", []wal.Record{{Payload: []byte("a")}})
	if err != nil {
		t.Fatal(err)
	}
	b := open(t, c, jswal.Options{StreamPrefix: "TK", Storage: jswal.Memory})
	ents, err := b.Append(ctx, "k", []wal.Record{{Payload: []byte("b")}, {Payload: []byte("c")}})
	if err != nil {
		t.Fatal(err)
	}
	if ents[0].Tick <= first[0].Tick || ents[1].Tick <= ents[0].Tick {
		t.Fatalf("ticks %d, %d after %d: not increasing", ents[0].Tick, ents[1].Tick, first[0].Tick)
	}
}

// TestTwoWritersSameTerm: two processes' logs (same term, no fencing)
// append batches to one queue at once. Their expected sequences conflict
// all the time; every record must still be stored exactly once, each
// writer's records in its order, offsets dense. (Batches of two writers
// may interleave on JetStream; hostd runs one writer per queue.)
func TestTwoWritersSameTerm(t *testing.T) {
	c := natstest.Start(t, natstest.Options{})
	ctx := ctxT(t)
	logs := []*jswal.Log{
		open(t, c, jswal.Options{StreamPrefix: "TW", Storage: jswal.Memory}),
		open(t, c, jswal.Options{StreamPrefix: "TW", Storage: jswal.Memory}),
	}
	if err := logs[0].Create(ctx, "q"); err != nil {
		t.Fatal(err)
	}
	const calls = 40
	errs := make(chan error, 4)
	for w := 0; w < 4; w++ {
		go func() {
			l := logs[w%2]
			for i := 0; i < calls; i++ {
				n := 1 + (i+w)%3
				recs := make([]wal.Record, n)
				for k := range recs {
					recs[k] = wal.Record{Payload: []byte(fmt.Sprintf("%d/%03d/%d", w, i, k))}
				}
				if _, err := l.Append(ctx, "q", recs); err != nil {
					errs <- fmt.Errorf("writer %d call %d: %w", w, i, err)
					return
				}
			}
			errs <- nil
		}()
	}
	for w := 0; w < 4; w++ {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	ents, err := logs[0].Read(ctx, "q", 0, 100000)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	last := map[byte]string{}
	want := 0
	for w := 0; w < 4; w++ {
		for i := 0; i < calls; i++ {
			want += 1 + (i+w)%3
		}
	}
	for i, e := range ents {
		p := string(e.Payload)
		if e.Offset != uint64(i) {
			t.Fatalf("entry %d at offset %d: not dense", i, e.Offset)
		}
		if seen[p] {
			t.Fatalf("%s stored twice", p)
		}
		seen[p] = true
		if p <= last[p[0]] {
			t.Fatalf("writer %c out of order: %s after %s", p[0], p, last[p[0]])
		}
		last[p[0]] = p
	}
	if len(ents) != want {
		t.Fatalf("%d records stored, want %d", len(ents), want)
	}
}

// TestUnavailableWhileServerDown: with the server gone, calls fail with
// wal.ErrUnavailable (the API's 503 + Retry-After), not an opaque error;
// once it is back, appends work again.
func TestUnavailableWhileServerDown(t *testing.T) {
	c := natstest.Start(t, natstest.Options{SyncAlways: true})
	ctx := ctxT(t)
	l := open(t, c, jswal.Options{StreamPrefix: "U", RequestTimeout: 300 * time.Millisecond})
	if err := l.Create(ctx, "u/0"); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Append(ctx, "u/0", []wal.Record{{Payload: []byte("a"), ID: "a"}}); err != nil {
		t.Fatal(err)
	}
	c.Stop(0)
	_, err := l.Append(ctx, "u/0", []wal.Record{{Payload: []byte("b"), ID: "b"}})
	if !errors.Is(err, wal.ErrUnavailable) {
		t.Fatalf("append with the server down: %v, want wal.ErrUnavailable", err)
	}
	if _, err := l.Bounds(ctx, "u/0"); !errors.Is(err, wal.ErrUnavailable) {
		t.Fatalf("bounds with the server down: %v, want wal.ErrUnavailable", err)
	}
	c.Restart(0)
	deadline := time.Now().Add(30 * time.Second)
	for {
		ents, err := wal.AppendOnce(ctx, l, "u/0", 0, []wal.Record{{Payload: []byte("b"), ID: "b"}})
		if err == nil {
			if len(ents) != 1 {
				t.Fatalf("append once: %v", ents)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("append after the restart: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	got, err := l.Read(ctx, "u/0", 0, 10)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, e := range got {
		if e.ID == "b" {
			n++
		}
	}
	if n != 1 {
		t.Fatalf("b stored %d times, want once: %v", n, got)
	}
}

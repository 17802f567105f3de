package broadcast

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/hostd-dev/hostd/runtime/catalog"
	"github.com/hostd-dev/hostd/runtime/wal"
	"github.com/hostd-dev/hostd/sdk/abi"
)

// plainChannels hides AtomicAppender, so that the engine persists each
// PENDING record through Options.Store (where the tests inject faults).
type plainChannels struct{ Channels }

// recordFaultStore fails or holds the commits of PENDING task records.
type recordFaultStore struct {
	catalog.Store
	fail atomic.Pointer[error] // when set, PENDING record commits fail with it
	hold chan struct{}         // when non-nil, PENDING record commits wait for it to close
}

func isPendingRecord(b *catalog.Batch) bool {
	for _, op := range b.Ops {
		if bytes.HasPrefix(op.Key, []byte(prefixTask)) && bytes.Contains(op.Value, []byte(`"state":"PENDING"`)) {
			return true
		}
	}
	return false
}

func (s *recordFaultStore) Commit(ctx context.Context, b *catalog.Batch) (catalog.Version, error) {
	if isPendingRecord(b) {
		if p := s.fail.Load(); p != nil {
			return 0, *p
		}
		if s.hold != nil {
			<-s.hold
		}
	}
	return s.Store.Commit(ctx, b)
}

func controlLen(t *testing.T, v *env) uint64 {
	t.Helper()
	_, max, err := v.res.Bounds(context.Background(), ControlChannel)
	if err != nil {
		t.Fatal(err)
	}
	return max
}

// A task record that can never fit one catalog value is refused with 413
// before any lock: it neither waits behind a holder of the cluster key
// nor holds the shared cluster key itself.
func TestTooLargeRefusedBeforeLocks(t *testing.T) {
	v := newEnv(t, []string{"q/0"}, nil, nil)
	// 400 KB payload (base64 ~533 KB) + 500 KB of properties: under
	// max_payload, over the 1 MiB catalog value.
	big := Request{Message: Message{Type: NoopType, Payload: make([]byte, 400<<10),
		Properties: map[string]string{"p": strings.Repeat("x", 500<<10)}}, VChannels: []string{"q/0"}}

	// Someone holds the cluster key exclusively: the refusal must not
	// wait for it.
	g, err := v.e.o.Locker.Lock(context.Background(), []abi.ResourceKey{key(abi.DomainCluster, "cluster", abi.Exclusive)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	res, err := v.e.Submit(ctx, &big)
	var tl *TooLargeError
	if !errors.As(err, &tl) || !errors.Is(err, ErrTooLarge) || res != nil {
		t.Fatalf("got %+v, %v; want *TooLargeError and no result", res, err)
	}
	if tl.Limit != 1<<20 || tl.Size <= tl.Limit || tl.LimitOption == "" {
		t.Fatalf("error does not name the limit: %+v", tl)
	}
	g.Release()

	// With nobody holding anything: refused again, and it holds nothing.
	if _, err := v.e.Submit(ctx, &big); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("second submit: %v", err)
	}
	if n := controlLen(t, v); n != 0 {
		t.Fatalf("a refused broadcast appended %d entries", n)
	}
	if ts, _ := v.e.List(Filter{}); len(ts) != 0 {
		t.Fatalf("a refused broadcast left tasks: %+v", ts)
	}
	ex := Request{Message: Message{Type: NoopType}, ResourceKeys: []abi.ResourceKey{key(abi.DomainCluster, "cluster", abi.Exclusive)}}
	if r := v.submit(ctx, ex); r.State != StateTombstone {
		t.Fatalf("exclusive cluster broadcast after a refused one: %+v", r)
	}
	// The message alone over one WAL record is refused too.
	v2 := newEnv(t, nil, func(o *Options) { o.MaxMessageBytes, o.MaxPayload = 64<<10, 60<<10 }, nil)
	_, err = v2.e.Submit(ctx, &Request{Message: Message{Type: NoopType, Payload: make([]byte, 60<<10),
		Properties: map[string]string{"p": strings.Repeat("x", 8<<10)}}})
	if !errors.As(err, &tl) || !strings.Contains(tl.LimitOption, "wal") {
		t.Fatalf("message over the WAL record limit: %v", err)
	}
}

// A permanent commit error of the PENDING record drops the task: the
// caller gets the error and no ID, nothing is appended, the keys and the
// idempotency reservation are released.
func TestPersistFailureDropsTask(t *testing.T) {
	var fs *recordFaultStore
	v := newEnv(t, []string{"q/0"}, func(o *Options) {
		fs = &recordFaultStore{Store: o.Store}
		o.Store = fs
		o.Channels = plainChannels{o.Channels}
	}, nil)
	perm := fmt.Errorf("%w: injected", catalog.ErrTooLarge)
	fs.fail.Store(&perm)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	req := Request{Message: Message{Type: NoopType, Payload: []byte("x")}, VChannels: []string{"q/0"},
		IdempotencyKey: "k1", ResourceKeys: []abi.ResourceKey{key("collection", "c", abi.Exclusive)}}
	res, err := v.e.Submit(ctx, &req)
	if !errors.Is(err, catalog.ErrTooLarge) || res != nil {
		t.Fatalf("got %+v, %v; want the commit error and no result", res, err)
	}
	if ctx.Err() != nil {
		t.Fatal("Submit returned only when its context ended")
	}
	if n := controlLen(t, v); n != 0 {
		t.Fatalf("a dropped task appended %d entries", n)
	}
	if ts, _ := v.e.List(Filter{}); len(ts) != 0 {
		t.Fatalf("a dropped task is still listed: %+v", ts)
	}
	fs.fail.Store(nil)
	// The keys are free and the idempotency key is not taken.
	r := v.submit(ctx, req)
	if r.Duplicate || r.State != StateTombstone {
		t.Fatalf("after the drop: %+v", r)
	}
}

// A wait that ends before the PENDING commit returns no ID.
func TestWaitEndsBeforePersistNoID(t *testing.T) {
	var fs *recordFaultStore
	hold := make(chan struct{})
	v := newEnv(t, nil, func(o *Options) {
		fs = &recordFaultStore{Store: o.Store, hold: hold}
		o.Store = fs
		o.Channels = plainChannels{o.Channels}
	}, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	res, err := v.e.Submit(ctx, &Request{Message: Message{Type: NoopType}, Wait: WaitPersisted})
	if !errors.Is(err, context.DeadlineExceeded) || res != nil {
		t.Fatalf("got %+v, %v; want a timeout and no ID", res, err)
	}
	close(hold)
	// The task persists later and completes; an ID handed out now is real.
	deadline := time.Now().Add(time.Minute)
	for {
		ts, _ := v.e.List(Filter{State: StateTombstone})
		if len(ts) == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("task never completed")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// Property: around the limits (payload, properties, keys) a broadcast
// is either refused with 413, or persisted and completed, also across a
// restart on the same Badger directory.
func TestLimitsProperty(t *testing.T) {
	const valueLimit = 48 << 10
	v := &env{t: t, dir: t.TempDir(), queues: []string{"q/0", "q/1"},
		catOpts: func(o *catalog.Options) { o.MaxValueSize = valueLimit },
		walCfg:  func(c *wal.Config) { c.MaxRecordBytes = valueLimit - 4<<10; c.MaxBatchBytes = 4 << 20 },
		opts:    func(o *Options) { o.MaxPayload = 30 << 10 },
	}
	if err := v.open(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(v.close)
	if v.e.o.MaxRecordBytes != valueLimit {
		t.Fatalf("engine did not take the catalog's value limit: %d", v.e.o.MaxRecordBytes)
	}
	accepted := map[uint64][]byte{}
	refused, iter := 0, 0
	rapid.Check(t, func(rt *rapid.T) {
		iter++
		payload := make([]byte, rapid.IntRange(0, 30<<10).Draw(rt, "payload"))
		for i := range payload {
			payload[i] = byte(i)
		}
		props := map[string]string{}
		for i, n := 0, rapid.IntRange(0, 4).Draw(rt, "props"); i < n; i++ {
			props[fmt.Sprintf("p%d", i)] = strings.Repeat("\x01", rapid.IntRange(0, 12<<10).Draw(rt, "prop")) // JSON-escaped 6x
		}
		var keys []abi.ResourceKey
		for i, n := 0, rapid.IntRange(0, 40).Draw(rt, "keys"); i < n; i++ {
			keys = append(keys, key("k", fmt.Sprintf("%d-%s", i, strings.Repeat("k", rapid.IntRange(1, 500).Draw(rt, "keylen"))), abi.Shared))
		}
		req := Request{Message: Message{Type: NoopType, Payload: payload, Properties: props},
			VChannels: []string{"q/0", "q/1"}, ResourceKeys: keys,
			IdempotencyKey: fmt.Sprintf("%06d", iter) + strings.Repeat("i", rapid.IntRange(0, 250).Draw(rt, "idem"))}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		res, err := v.e.Submit(ctx, &req)
		if errors.Is(err, ErrTooLarge) {
			refused++
			return
		}
		if err != nil || res.State != StateTombstone || res.Duplicate {
			rt.Fatalf("neither 413 nor completed: %v (result %v)", err, res != nil)
		}
		accepted[res.ID] = payload
		if rapid.IntRange(0, 9).Draw(rt, "restart") == 0 {
			v.restart()
			for id, p := range accepted {
				in, err := v.e.Get(id)
				if err != nil || in.State != StateTombstone || !bytes.Equal(in.Message.Payload, p) {
					rt.Fatalf("after restart task %d: %v (payload kept: %v)", id, err, err == nil && bytes.Equal(in.Message.Payload, p))
				}
			}
		}
	})
	v.restart()
	for id := range accepted {
		if in, err := v.e.Get(id); err != nil || in.State != StateTombstone {
			t.Fatalf("after the final restart task %d: %v", id, err)
		}
	}
	t.Logf("%d accepted, %d refused with 413", len(accepted), refused)
	if len(accepted) == 0 || refused == 0 {
		t.Fatalf("the property did not explore both sides of the limit (%d accepted, %d refused)", len(accepted), refused)
	}
}

// Options whose max_payload can never fit one task record are refused.
func TestImpossibleOptions(t *testing.T) {
	if err := CheckLimits(DefaultMaxPayload, DefaultMaxKeyLen, nil, DefaultMaxRecordBytes, DefaultMaxMessageBytes); err != nil {
		t.Fatalf("defaults do not fit: %v", err)
	}
	err := CheckLimits(800<<10, DefaultMaxKeyLen, nil, DefaultMaxRecordBytes, DefaultMaxMessageBytes)
	var tl *TooLargeError
	if !errors.As(err, &tl) || !strings.Contains(tl.LimitOption, "max_payload") {
		t.Fatalf("800 KiB max_payload: %v", err)
	}
	v := &env{t: t, dir: t.TempDir()}
	v.opts = func(o *Options) { o.MaxPayload = 1 << 20 }
	if err := v.open(); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("New with max_payload 1 MiB: %v", err)
	}
	v.close()
}

// A stored error or abandon note is clipped so that the record's worst
// case holds.
func TestClipJSON(t *testing.T) {
	for _, s := range []string{"", "short", strings.Repeat("é", 5000), strings.Repeat("\x01", 5000), strings.Repeat("a", 4096), strings.Repeat("a", 4097)} {
		c := clipJSON(s, maxStoredError)
		if jsonLen(c) > maxStoredError {
			t.Fatalf("clip of %d bytes: %d JSON bytes", len(s), jsonLen(c))
		}
		if jsonLen(s) <= maxStoredError && c != s {
			t.Fatalf("clipped a string that fits")
		}
	}
}

// recordSize bounds the worst case's real size from above, closely.
func TestRecordSizeBound(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		props := rapid.MapOf(rapid.String(), rapid.String()).Draw(rt, "props")
		rec := taskRecord{
			Message: Message{Type: rapid.String().Draw(rt, "type"), Payload: rapid.SliceOf(rapid.Byte()).Draw(rt, "payload"), Properties: props},
			// Distinct, as the engine stores them (it dedups the request's
			// vchannels): duplicates would share one low_water map entry in
			// the real record while the bound counts each.
			VChannels: rapid.SliceOfDistinct(rapid.String(), func(s string) string { return s }).Draw(rt, "vcs"),
			IdemKey:   rapid.String().Draw(rt, "idem"),
			Scope:     Scope{Kind: rapid.SampledFrom([]string{"", "cluster", "database"}).Draw(rt, "kind"), ID: rapid.String().Draw(rt, "id")},
		}
		for i, n := 0, rapid.IntRange(0, 5).Draw(rt, "nkeys"); i < n; i++ {
			rec.Keys = append(rec.Keys, abi.ResourceKey{Domain: rapid.String().Draw(rt, "d"), Key: rapid.String().Draw(rt, "k"),
				Mode: abi.LockMode(rapid.IntRange(0, 1).Draw(rt, "m"))})
		}
		w := worstRecord(rec)
		b, err := json.Marshal(&w)
		if err != nil {
			rt.Fatal(err)
		}
		n, err := recordSize(&rec)
		if err != nil {
			rt.Fatal(err)
		}
		if n < len(b) || n > len(b)+256 {
			rt.Fatalf("recordSize %d, real worst case %d", n, len(b))
		}
	})
}

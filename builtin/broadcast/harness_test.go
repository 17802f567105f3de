package broadcast

import (
	"context"
	"errors"
	"fmt"
	"math/rand"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hostd-dev/hostd/builtin/locks"
	"github.com/hostd-dev/hostd/runtime/catalog"
	"github.com/hostd-dev/hostd/runtime/wal"
	"github.com/hostd-dev/hostd/sdk/abi"
)

// keyLocker adapts builtin/locks (as host does) for tests.
type keyLocker struct{ l *locks.KeyLocker }

func (k keyLocker) Lock(ctx context.Context, keys []abi.ResourceKey) (Guard, error) {
	g, err := k.l.Lock(ctx, "broadcast", keys)
	if err != nil {
		return nil, err
	}
	return guard{g}, nil
}
func (k keyLocker) TryLock(keys []abi.ResourceKey) (Guard, error) {
	g, err := k.l.TryLock("broadcast", keys)
	if err != nil {
		return nil, err
	}
	return guard{g}, nil
}

type guard struct{ g *locks.Guard }

func (g guard) Release() { g.g.Unlock() }

// env is a real engine on real Badger in a temp dir, with the real WAL and
// locker; restart() reopens everything on the same directory.
type env struct {
	t      *testing.T
	dir    string
	store  catalog.Store
	wal    *wal.WAL
	res    *wal.Direct
	locker *locks.KeyLocker
	e      *Engine
	chans  Channels
	opts   func(*Options)
	reg    func(*Engine)
	queues []string
	// catOpts and walCfg, when set before open, adjust the catalog and
	// WAL options (limits tests).
	catOpts func(*catalog.Options)
	walCfg  func(*wal.Config)
}

func newEnv(t *testing.T, queues []string, opts func(*Options), reg func(*Engine)) *env {
	t.Helper()
	return newEnvAt(t, t.TempDir(), queues, opts, reg)
}

func newEnvAt(t *testing.T, dir string, queues []string, opts func(*Options), reg func(*Engine)) *env {
	t.Helper()
	v := &env{t: t, dir: dir, opts: opts, reg: reg, queues: queues}
	if err := v.open(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(v.close)
	return v
}

// open opens the catalog of v.dir (Badger, or an etcd catalog while
// TestOnEtcd runs; catOpts applies to Badger only), the WAL, the locker
// and the engine.
func (v *env) open() error {
	var st catalog.Store
	if onEtcd != nil {
		s, err := onEtcd.Open(v.dir)
		if err != nil {
			return err
		}
		st = s
	} else {
		o := catalog.DefaultOptions(v.dir)
		o.GCInterval = 0
		if v.catOpts != nil {
			v.catOpts(&o)
		}
		db, err := catalog.Open(o)
		if err != nil {
			return err
		}
		st = db
	}
	wc := wal.Config{Store: st, Queues: v.queues}
	if v.walCfg != nil {
		v.walCfg(&wc)
	}
	w, err := wal.Open(context.Background(), wc)
	if err != nil {
		st.Close()
		return err
	}
	res, err := wal.NewDirect(context.Background(), w)
	if err != nil {
		return err
	}
	v.store, v.wal, v.res = st, w, res
	v.locker = locks.NewKeyLocker(locks.KeyLockerOptions{})
	v.chans = ResolverChannels{R: res}
	opts := Options{Store: st, Locker: keyLocker{v.locker}, Channels: v.chans}
	if v.opts != nil {
		v.opts(&opts)
	}
	e, err := New(opts)
	if err != nil {
		return err
	}
	if err := e.Register(NoopType, Noop{}, TypeOptions{}); err != nil {
		return err
	}
	if v.reg != nil {
		v.reg(e)
	}
	v.e = e
	return e.Start(context.Background())
}

func (v *env) close() {
	if v.e != nil {
		v.e.Close()
		v.e = nil
	}
	if v.wal != nil {
		v.wal.Close()
		v.wal = nil
	}
	if v.store != nil {
		v.store.Close()
		v.store = nil
	}
	if v.locker != nil {
		v.locker.Close()
		v.locker = nil
	}
}

func (v *env) restart() {
	v.t.Helper()
	v.close()
	if err := v.open(); err != nil {
		v.t.Fatal(err)
	}
}

func (v *env) submit(ctx context.Context, r Request) *Result {
	v.t.Helper()
	res, err := v.e.Submit(ctx, &r)
	if err != nil {
		v.t.Fatalf("submit %+v: %v", r, err)
	}
	return res
}

// waitState polls until task id is in state s.
func (v *env) waitState(id uint64, s State) *TaskInfo {
	v.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		in, err := v.e.Get(id)
		if err == nil && in.State == s {
			return in
		}
		if time.Now().After(deadline) {
			v.t.Fatalf("task %d: want %s, have %+v (err %v)", id, s, in, err)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// assertNoDuplicates reads every vchannel and fails if a (broadcast id,
// epoch) appears twice in one of them; it returns the count per id.
func (v *env) assertNoDuplicates(vcs ...string) map[uint64]int {
	v.t.Helper()
	per := map[uint64]int{}
	for _, vc := range append([]string{ControlChannel}, vcs...) {
		seen := map[string]bool{}
		from := uint64(0)
		for {
			ms, err := v.res.Read(context.Background(), vc, from, 512)
			if err != nil {
				v.t.Fatalf("read %s: %v", vc, err)
			}
			if len(ms) == 0 {
				break
			}
			for _, m := range ms {
				k := m.Props[HeaderBroadcastID] + "/" + m.Props[headerEpoch]
				if seen[k] {
					v.t.Fatalf("vchannel %s holds broadcast %s twice", vc, k)
				}
				seen[k] = true
				id, _ := strconv.ParseUint(m.Props[HeaderBroadcastID], 10, 64)
				if vc == ControlChannel {
					per[id]++
				}
			}
			from = ms[len(ms)-1].Offset + 1
		}
	}
	return per
}

// fnHandler is a Handler from functions (test doubles of plugin types).
type fnHandler struct {
	keys     func(*Message) []abi.ResourceKey
	validate func(*Message, catalog.Reader) error
	ack      func(context.Context, *AckCall) (AckResult, error)
}

func (f fnHandler) ResourceKeys(_ context.Context, m *Message) ([]abi.ResourceKey, error) {
	if f.keys == nil {
		return nil, nil
	}
	return f.keys(m), nil
}
func (f fnHandler) Validate(_ context.Context, m *Message, r catalog.Reader) error {
	if f.validate == nil {
		return nil
	}
	return f.validate(m, r)
}
func (f fnHandler) Ack(ctx context.Context, c *AckCall) (AckResult, error) {
	if f.ack == nil {
		return AckResult{}, nil
	}
	return f.ack(ctx, c)
}

// flakyChannels fails a fraction of appends (fault injection only).
type flakyChannels struct {
	Channels
	mu   sync.Mutex
	rnd  *rand.Rand
	frac float64
	n    int
}

func (f *flakyChannels) Append(ctx context.Context, es []AppendEntry) ([]AppendOutcome, error) {
	f.mu.Lock()
	fail := make([]bool, len(es))
	var keep []AppendEntry
	var idx []int
	for i := range es {
		fail[i] = f.rnd.Float64() < f.frac
		if !fail[i] {
			keep = append(keep, es[i])
			idx = append(idx, i)
		}
	}
	f.mu.Unlock()
	outs := make([]AppendOutcome, len(es))
	for i := range outs {
		if fail[i] {
			outs[i].Err = errors.New("injected append failure")
			f.mu.Lock()
			f.n++
			f.mu.Unlock()
		}
	}
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

// storeRef hands the current env's store to handlers started during
// recovery (before newEnv returns).
type storeRef struct{ p atomic.Pointer[catalog.Store] }

func (r *storeRef) set(o *Options)     { st := o.Store; r.p.Store(&st) }
func (r *storeRef) get() catalog.Store { return *r.p.Load() }

func key(domain, k string, mode abi.LockMode) abi.ResourceKey {
	return abi.ResourceKey{Domain: domain, Key: k, Mode: mode}
}

func vcs(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("t/%d", i)
	}
	return out
}

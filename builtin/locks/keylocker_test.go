package locks

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/hostd-dev/hostd/sdk/abi"
)

func ex(d, k string) abi.ResourceKey { return abi.ResourceKey{Domain: d, Key: k, Mode: abi.Exclusive} }
func sh(d, k string) abi.ResourceKey { return abi.ResourceKey{Domain: d, Key: k, Mode: abi.Shared} }

func TestCanonicalize(t *testing.T) {
	tests := []struct {
		name string
		in   []abi.ResourceKey
		want []abi.ResourceKey
		bad  string // substring of the error, "" = ok
	}{
		{name: "empty", in: nil, want: []abi.ResourceKey{}},
		{name: "sorted by domain then key",
			in:   []abi.ResourceKey{sh("db", "b"), ex("collection", "z"), sh("db", "a"), ex("cluster", "c")},
			want: []abi.ResourceKey{ex("cluster", "c"), ex("collection", "z"), sh("db", "a"), sh("db", "b")}},
		{name: "dedupe shared", in: []abi.ResourceKey{sh("d", "k"), sh("d", "k")}, want: []abi.ResourceKey{sh("d", "k")}},
		{name: "exclusive wins after", in: []abi.ResourceKey{sh("d", "k"), ex("d", "k"), sh("d", "k")}, want: []abi.ResourceKey{ex("d", "k")}},
		{name: "exclusive wins before", in: []abi.ResourceKey{ex("d", "k"), sh("d", "k")}, want: []abi.ResourceKey{ex("d", "k")}},
		{name: "same key other domain kept", in: []abi.ResourceKey{sh("a", "k"), ex("b", "k")}, want: []abi.ResourceKey{sh("a", "k"), ex("b", "k")}},
		{name: "empty domain", in: []abi.ResourceKey{sh("d", "k"), sh("", "k")}, bad: "#1"},
		{name: "empty key", in: []abi.ResourceKey{sh("d", "")}, bad: "empty key"},
		{name: "bad mode", in: []abi.ResourceKey{{Domain: "d", Key: "k", Mode: 7}}, bad: "unknown mode"},
		{name: "overlong key", in: []abi.ResourceKey{sh("d", string(make([]byte, MaxKeyLen+1)))}, bad: "longer than"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := append([]abi.ResourceKey(nil), tt.in...)
			got, err := Canonicalize(in)
			if tt.bad != "" {
				var ike *InvalidKeyError
				if !errors.As(err, &ike) || !errors.Is(err, ErrInvalidKey) {
					t.Fatalf("err = %v, want *InvalidKeyError", err)
				}
				if !strings.Contains(err.Error(), tt.bad) {
					t.Fatalf("err %q does not mention %q", err, tt.bad)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if d := cmp.Diff(tt.want, got); d != "" {
				t.Fatalf("(-want +got)\n%s", d)
			}
			if d := cmp.Diff(tt.in, in); d != "" {
				t.Fatalf("input modified: %s", d)
			}
		})
	}
}

func TestLockRejectsNoKeys(t *testing.T) {
	l := NewKeyLocker(KeyLockerOptions{})
	if _, err := l.Lock(context.Background(), "a", nil); !errors.Is(err, ErrInvalidKey) {
		t.Fatalf("Lock(nil) = %v", err)
	}
	if _, err := l.TryLock("a", []abi.ResourceKey{sh("", "x")}); !errors.Is(err, ErrInvalidKey) {
		t.Fatalf("TryLock(empty domain) = %v", err)
	}
}

func TestTryLockConflictNamesKeyAndHolder(t *testing.T) {
	l := NewKeyLocker(KeyLockerOptions{})
	g, err := l.TryLock("X", []abi.ResourceKey{ex("c", "c")})
	if err != nil {
		t.Fatal(err)
	}
	_, err = l.TryLock("Y", []abi.ResourceKey{ex("c", "a"), ex("c", "b"), sh("c", "c")})
	var ce *ConflictError
	if !errors.As(err, &ce) || !errors.Is(err, ErrLocked) {
		t.Fatalf("err = %v, want *ConflictError", err)
	}
	if ce.Key != sh("c", "c") || len(ce.Holders) != 1 || ce.Holders[0] != "X" {
		t.Fatalf("conflict = %+v", ce)
	}
	// All-or-nothing: a and b were not taken.
	if h := l.Holders(); len(h) != 1 || h[0].Owner != "X" {
		t.Fatalf("holders = %+v", h)
	}
	g.Unlock()
	g.Unlock() // idempotent
	if s := l.Stats(); s.Keys != 0 {
		t.Fatalf("keys left after unlock: %+v", s)
	}
}

func TestSharedHoldersCoexist(t *testing.T) {
	l := NewKeyLocker(KeyLockerOptions{})
	g1, err := l.TryLock("r1", []abi.ResourceKey{sh("d", "k")})
	if err != nil {
		t.Fatal(err)
	}
	g2, err := l.TryLock("r2", []abi.ResourceKey{sh("d", "k")})
	if err != nil {
		t.Fatal(err)
	}
	_, err = l.TryLock("w", []abi.ResourceKey{ex("d", "k")})
	var ce *ConflictError
	if !errors.As(err, &ce) || len(ce.Holders) != 2 {
		t.Fatalf("err = %v", err)
	}
	g1.Unlock()
	g2.Unlock()
	g3, err := l.TryLock("w", []abi.ResourceKey{ex("d", "k")})
	if err != nil {
		t.Fatal(err)
	}
	g3.Unlock()
}

// Broadcast scenario 4: acquiring and releasing without doing anything
// frees the keys.
func TestAcquireReleaseFreesKeys(t *testing.T) {
	l := NewKeyLocker(KeyLockerOptions{})
	keys := []abi.ResourceKey{sh("cluster", ""), ex("collection", "db.c1"), sh("database", "db")}
	keys[0].Key = "c"
	g, err := l.Lock(context.Background(), "bc", keys)
	if err != nil {
		t.Fatal(err)
	}
	g.Unlock()
	if s := l.Stats(); s.Keys != 0 || s.Waiters != 0 {
		t.Fatalf("stats after release = %+v", s)
	}
	g2, err := l.TryLock("other", []abi.ResourceKey{ex("cluster", "c"), ex("collection", "db.c1"), ex("database", "db")})
	if err != nil {
		t.Fatalf("keys not free: %v", err)
	}
	g2.Unlock()
}

// waitQueued waits until the locker has n waiters.
func waitQueued(t *testing.T, l *KeyLocker, n int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for l.Stats().Waiters != n {
		if time.Now().After(deadline) {
			t.Fatalf("waiters = %d, want %d", l.Stats().Waiters, n)
		}
		time.Sleep(time.Millisecond)
	}
}

type lockResult struct {
	g   *Guard
	err error
}

func lockAsync(l *KeyLocker, ctx context.Context, owner string, keys ...abi.ResourceKey) <-chan lockResult {
	ch := make(chan lockResult, 1)
	go func() {
		g, err := l.Lock(ctx, owner, keys)
		ch <- lockResult{g, err}
	}()
	return ch
}

func mustGet(t *testing.T, ch <-chan lockResult) *Guard {
	t.Helper()
	select {
	case r := <-ch:
		if r.err != nil {
			t.Fatal(r.err)
		}
		return r.g
	case <-time.After(5 * time.Second):
		t.Fatal("lock not granted")
		return nil
	}
}

func mustWait(t *testing.T, ch <-chan lockResult) {
	t.Helper()
	select {
	case r := <-ch:
		t.Fatalf("granted too early: %+v", r)
	case <-time.After(20 * time.Millisecond):
	}
}

// Locks scenario 5: readers hold shared, a writer waits, later readers
// queue behind the writer.
func TestWriterNotStarved(t *testing.T) {
	l := NewKeyLocker(KeyLockerOptions{})
	ctx := context.Background()
	r1, err := l.Lock(ctx, "r1", []abi.ResourceKey{sh("d", "k")})
	if err != nil {
		t.Fatal(err)
	}
	w := lockAsync(l, ctx, "w", ex("d", "k"))
	waitQueued(t, l, 1)
	r2 := lockAsync(l, ctx, "r2", sh("d", "k"))
	waitQueued(t, l, 2)
	// A non-blocking reader is refused too, naming the queued writer.
	_, err = l.TryLock("r3", []abi.ResourceKey{sh("d", "k")})
	var ce *ConflictError
	if !errors.As(err, &ce) || len(ce.Waiters) != 1 || ce.Waiters[0] != "w" {
		t.Fatalf("TryLock behind writer = %v", err)
	}
	mustWait(t, r2)
	snap := l.Snapshot()
	if len(snap) != 1 || len(snap[0].Waiters) != 2 || snap[0].Waiters[0].Owner != "w" || snap[0].Waiters[1].Owner != "r2" {
		t.Fatalf("snapshot = %+v", snap)
	}
	r1.Unlock()
	wg := mustGet(t, w)
	mustWait(t, r2)
	wg.Unlock()
	mustGet(t, r2).Unlock()
	if s := l.Stats(); s.Keys != 0 || s.Waiters != 0 {
		t.Fatalf("stats = %+v", s)
	}
}

// A waiter blocked on one key does not hold up an unrelated request, and a
// later request on other keys is granted at once.
func TestWaiterDoesNotBlockUnrelated(t *testing.T) {
	l := NewKeyLocker(KeyLockerOptions{})
	ctx := context.Background()
	h, _ := l.Lock(ctx, "h", []abi.ResourceKey{ex("d", "a")})
	w := lockAsync(l, ctx, "w", ex("d", "a"), ex("d", "b"))
	waitQueued(t, l, 1)
	// "b" is wanted by an earlier waiter: refused (fairness).
	if _, err := l.TryLock("x", []abi.ResourceKey{sh("d", "b")}); !errors.Is(err, ErrLocked) {
		t.Fatalf("TryLock(b) = %v", err)
	}
	// "c" is free.
	g, err := l.TryLock("x", []abi.ResourceKey{ex("d", "c")})
	if err != nil {
		t.Fatal(err)
	}
	g.Unlock()
	h.Unlock()
	mustGet(t, w).Unlock()
}

// Locks scenario 6: a waiter whose context ends is removed and never
// granted later; removing a queued writer lets the readers behind it in.
func TestCanceledWaiterRemoved(t *testing.T) {
	l := NewKeyLocker(KeyLockerOptions{})
	bg := context.Background()
	r1, _ := l.Lock(bg, "r1", []abi.ResourceKey{sh("d", "k")})
	ctx, cancel := context.WithCancel(bg)
	w := lockAsync(l, ctx, "w", ex("d", "k"), ex("d", "other"))
	waitQueued(t, l, 1)
	r2 := lockAsync(l, bg, "r2", sh("d", "k"))
	waitQueued(t, l, 2)
	cancel()
	select {
	case r := <-w:
		if !errors.Is(r.err, context.Canceled) || r.g != nil {
			t.Fatalf("canceled waiter got %+v", r)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("canceled waiter did not return")
	}
	// The reader behind the removed writer is granted at once.
	g2 := mustGet(t, r2)
	r1.Unlock()
	g2.Unlock()
	if s := l.Stats(); s.Keys != 0 || s.Waiters != 0 {
		t.Fatalf("stats = %+v (canceled waiter left something)", s)
	}
	// Nobody holds "other": the canceled waiter was never granted.
	if h := l.Holders(); len(h) != 0 {
		t.Fatalf("holders = %+v", h)
	}
}

func TestLockWithDeadline(t *testing.T) {
	l := NewKeyLocker(KeyLockerOptions{})
	h, _ := l.TryLock("h", []abi.ResourceKey{ex("d", "k")})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if _, err := l.Lock(ctx, "w", []abi.ResourceKey{ex("d", "k")}); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err = %v", err)
	}
	done, dcancel := context.WithCancel(context.Background())
	dcancel()
	if _, err := l.Lock(done, "w", []abi.ResourceKey{ex("d", "free")}); !errors.Is(err, context.Canceled) {
		t.Fatalf("Lock with ended ctx = %v", err)
	}
	h.Unlock()
	if s := l.Stats(); s.Keys != 0 {
		t.Fatalf("stats = %+v", s)
	}
}

// Locks scenario 13: Close with waiters gives them a clear error, no hang.
func TestCloseFailsWaiters(t *testing.T) {
	l := NewKeyLocker(KeyLockerOptions{})
	bg := context.Background()
	h, _ := l.Lock(bg, "h", []abi.ResourceKey{ex("d", "k")})
	var chans []<-chan lockResult
	for i := 0; i < 10; i++ {
		chans = append(chans, lockAsync(l, bg, fmt.Sprint("w", i), ex("d", "k")))
	}
	waitQueued(t, l, 10)
	l.Close()
	for _, ch := range chans {
		select {
		case r := <-ch:
			if !errors.Is(r.err, ErrClosed) {
				t.Fatalf("waiter got %+v, want ErrClosed", r)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("waiter hangs after Close")
		}
	}
	if _, err := l.Lock(bg, "late", []abi.ResourceKey{ex("d", "z")}); !errors.Is(err, ErrClosed) {
		t.Fatalf("Lock after Close = %v", err)
	}
	if _, err := l.TryLock("late", []abi.ResourceKey{ex("d", "z")}); !errors.Is(err, ErrClosed) {
		t.Fatalf("TryLock after Close = %v", err)
	}
	h.Unlock()
	l.Close()
	if s := l.Stats(); s.Keys != 0 || s.Waiters != 0 {
		t.Fatalf("stats = %+v", s)
	}
}

// shadow checks the locking invariant from outside: per key, either one
// exclusive holder or any number of shared ones.
type shadow struct {
	mu      sync.Mutex
	readers map[string]int
	writer  map[string]bool
}

func newShadow() *shadow { return &shadow{readers: map[string]int{}, writer: map[string]bool{}} }

func (s *shadow) enter(t *testing.T, keys []abi.ResourceKey) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, k := range keys {
		id := k.Domain + "/" + k.Key
		if s.writer[id] || (k.Mode == abi.Exclusive && s.readers[id] > 0) {
			t.Errorf("invariant broken on %s (mode %s)", id, k.Mode)
		}
		if k.Mode == abi.Exclusive {
			s.writer[id] = true
		} else {
			s.readers[id]++
		}
	}
}

func (s *shadow) leave(keys []abi.ResourceKey) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, k := range keys {
		id := k.Domain + "/" + k.Key
		if k.Mode == abi.Exclusive {
			s.writer[id] = false
		} else {
			s.readers[id]--
		}
	}
}

// Broadcast scenario 2 / locks scenario 4: opposite-order multi-key
// requests from many goroutines never deadlock and never hold partially.
func TestOppositeOrderNoDeadlock(t *testing.T) {
	l := NewKeyLocker(KeyLockerOptions{})
	sw := newShadow()
	const goroutines, loops = 8, 10000 / 4
	var wg sync.WaitGroup
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for g := 0; g < goroutines; g++ {
		keys := []abi.ResourceKey{ex("d", "a"), ex("d", "b")}
		if g%2 == 1 {
			keys = []abi.ResourceKey{ex("d", "b"), ex("d", "a")}
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < loops; i++ {
				gd, err := l.Lock(ctx, fmt.Sprint("g", g), keys)
				if err != nil {
					t.Errorf("deadlock or error: %v", err)
					return
				}
				ck := gd.Keys()
				sw.enter(t, ck)
				if len(ck) != 2 {
					t.Errorf("partial hold: %v", ck)
				}
				sw.leave(ck)
				gd.Unlock()
			}
		}()
	}
	wg.Wait()
	if s := l.Stats(); s.Keys != 0 || s.Waiters != 0 {
		t.Fatalf("stats = %+v", s)
	}
}

// Hammer: random key sets and modes, blocking and non-blocking, random
// cancellations, under -race; the shadow checks exclusion throughout and
// everything drains at the end.
func TestKeyLockerHammer(t *testing.T) {
	l := NewKeyLocker(KeyLockerOptions{})
	sw := newShadow()
	const goroutines = 16
	loops := 800
	if testing.Short() {
		loops = 300
	}
	var granted, refused, canceled atomic.Int64
	var wg sync.WaitGroup
	for g := 0; g < goroutines; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(g), 42))
			for i := 0; i < loops; i++ {
				n := 1 + rng.IntN(3)
				keys := make([]abi.ResourceKey, n)
				for j := range keys {
					keys[j] = abi.ResourceKey{Domain: "d", Key: fmt.Sprint(rng.IntN(6)), Mode: abi.LockMode(rng.IntN(2))}
				}
				var gd *Guard
				var err error
				switch rng.IntN(3) {
				case 0:
					gd, err = l.TryLock("h", keys)
				case 1:
					ctx, cancel := context.WithTimeout(context.Background(), time.Duration(rng.IntN(200))*time.Microsecond)
					gd, err = l.Lock(ctx, "h", keys)
					cancel()
				default:
					gd, err = l.Lock(context.Background(), "h", keys)
				}
				switch {
				case err == nil:
					granted.Add(1)
				case errors.Is(err, ErrLocked):
					refused.Add(1)
					continue
				case errors.Is(err, context.DeadlineExceeded):
					canceled.Add(1)
					continue
				default:
					t.Errorf("unexpected error: %v", err)
					return
				}
				ck := gd.Keys()
				sw.enter(t, ck)
				if rng.IntN(4) == 0 {
					time.Sleep(time.Duration(rng.IntN(50)) * time.Microsecond)
				}
				sw.leave(ck)
				gd.Unlock()
			}
		}()
	}
	wg.Wait()
	if s := l.Stats(); s.Keys != 0 || s.Waiters != 0 {
		t.Fatalf("stats = %+v", s)
	}
	t.Logf("granted=%d refused=%d canceled=%d", granted.Load(), refused.Load(), canceled.Load())
	if granted.Load() == 0 {
		t.Fatal("nothing granted")
	}
}

func BenchmarkKeyLockerUncontended(b *testing.B) {
	l := NewKeyLocker(KeyLockerOptions{})
	ctx := context.Background()
	keys := []abi.ResourceKey{ex("collection", "db.c1"), sh("database", "db")}
	b.ReportAllocs()
	for b.Loop() {
		g, err := l.Lock(ctx, "bench", keys)
		if err != nil {
			b.Fatal(err)
		}
		g.Unlock()
	}
}

func BenchmarkKeyLockerParallelDistinct(b *testing.B) {
	l := NewKeyLocker(KeyLockerOptions{})
	var n atomic.Int64
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		keys := []abi.ResourceKey{ex("collection", fmt.Sprint(n.Add(1))), sh("cluster", "c")}
		ctx := context.Background()
		for pb.Next() {
			g, err := l.Lock(ctx, "bench", keys)
			if err != nil {
				b.Error(err)
				return
			}
			g.Unlock()
		}
	})
}

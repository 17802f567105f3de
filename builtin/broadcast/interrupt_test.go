package broadcast

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/hostd-dev/hostd/runtime/wasm"
	"github.com/hostd-dev/hostd/sdk/abi"
)

// blockType's callback blocks until its context ends, reporting each run.
const blockType = "Block"

func blockingEnv(t *testing.T, started chan<- uint64, p **traced) *env {
	t.Helper()
	return newEnv(t, vcs(2), func(o *Options) {
		if p != nil && *p != nil {
			o.TracerProvider = (*p).tp
		}
	}, func(e *Engine) {
		e.Register(blockType, fnHandler{ack: func(ctx context.Context, c *AckCall) (AckResult, error) {
			started <- c.BroadcastID
			<-ctx.Done()
			return AckResult{}, ctx.Err()
		}}, TypeOptions{})
	})
}

func interruptedSpans(p *traced, why string) int {
	n := 0
	for _, s := range p.named("process broadcast") {
		if v, ok := attr(s, "hostd.interrupted"); ok && v.AsString() == why {
			n++
		}
	}
	return n
}

// Abandon interrupts a callback that waits: it returns at once (not
// when the call would have ended), the task is FAILED and abandoned, and
// the attempt's span says why it ended.
func TestAbandonInterruptsBlockedCallback(t *testing.T) {
	p := newTraced(t)
	started := make(chan uint64, 4)
	v := blockingEnv(t, started, &p)
	res := v.submit(context.Background(), Request{Message: Message{Type: blockType}, VChannels: vcs(2), Wait: WaitPersisted})
	select {
	case <-started:
	case <-time.After(2 * time.Minute):
		t.Fatal("callback never started")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	in, err := v.e.Abandon(ctx, res.ID, "op", "stuck plugin")
	if err != nil {
		t.Fatalf("abandon of a task whose callback blocks: %v", err)
	}
	if in.State != StateFailed || in.Abandoned == nil {
		t.Fatalf("after abandon: %+v", in)
	}
	if n := interruptedSpans(p, "abandoned"); n != 1 {
		t.Fatalf("%d process spans say hostd.interrupted=abandoned, want 1", n)
	}
	// The span's parent is still the persisted trace context.
	for _, s := range p.named("process broadcast") {
		if s.SpanContext().TraceID().String() != in.TraceID {
			t.Fatalf("process span in trace %s, task trace %s", s.SpanContext().TraceID(), in.TraceID)
		}
	}
}

// Close with several blocked callbacks returns promptly; the tasks stay
// PENDING and resume at the next start.
func TestCloseInterruptsBlockedCallbacks(t *testing.T) {
	p := newTraced(t)
	started := make(chan uint64, 16)
	v := blockingEnv(t, started, &p)
	const n = 4
	var ids []uint64
	for i := range n {
		res := v.submit(context.Background(), Request{Message: Message{Type: blockType}, VChannels: vcs(2),
			ResourceKeys: []abi.ResourceKey{key("collection", string(rune('a'+i)), abi.Exclusive)}, Wait: WaitPersisted})
		ids = append(ids, res.ID)
	}
	for range n {
		select {
		case <-started:
		case <-time.After(2 * time.Minute):
			t.Fatal("callbacks never started")
		}
	}
	closed := make(chan error, 1)
	go func() { closed <- v.e.Close() }()
	select {
	case err := <-closed:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(2 * time.Minute):
		t.Fatal("Close waits for blocked callbacks")
	}
	if got := interruptedSpans(p, "shutting down"); got != n {
		t.Fatalf("%d process spans say hostd.interrupted=shutting down, want %d", got, n)
	}
	v.e = nil
	v.restart()
	for _, id := range ids {
		if in, err := v.e.Get(id); err != nil || in.State != StatePending {
			t.Fatalf("task %d after restart: %+v %v", id, in, err)
		}
	}
}

// A real Wasm plugin looping forever (call timeout 10 minutes) is stopped
// by an abandon of its task and by Close: the runtime's watchdog ends the
// guest when the caller's context is cancelled.
func TestAbandonAndCloseStopLoopingWasmCallback(t *testing.T) {
	v, _ := wasmEnvLimits(t, vcs(2), wasm.Limits{PoolSize: 2, CallTimeout: 10 * time.Minute},
		map[string]string{"faults": "../../runtime/wasm/testdata/faults"})
	submit := func(k string) uint64 {
		res := v.submit(context.Background(), Request{Message: Message{Type: "Loop", Payload: []byte("loop")},
			VChannels: vcs(2), ResourceKeys: []abi.ResourceKey{key("collection", k, abi.Exclusive)}, Wait: WaitPersisted})
		return res.ID
	}
	waitAttempt := func(id uint64) {
		deadline := time.Now().Add(5 * time.Minute)
		for {
			// The attempt counter is persisted when an attempt ends; the
			// driver's state shows the call is under way once appended.
			in, err := v.e.Get(id)
			if err == nil && len(in.MissingAcks) == 0 {
				time.Sleep(200 * time.Millisecond) // let the guest enter its loop
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("task %d never reached its callback", id)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	a := submit("a")
	waitAttempt(a)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	t0 := time.Now()
	in, err := v.e.Abandon(ctx, a, "op", "looping plugin")
	if err != nil || in.State != StateFailed {
		t.Fatalf("abandon of a looping wasm callback: %+v %v", in, err)
	}
	t.Logf("abandon returned after %v", time.Since(t0))
	b, c := submit("b"), submit("c")
	waitAttempt(b)
	waitAttempt(c)
	closed := make(chan error, 1)
	t0 = time.Now()
	go func() { closed <- v.e.Close() }()
	select {
	case err := <-closed:
		if err != nil && !errors.Is(err, ErrClosed) {
			t.Fatal(err)
		}
	case <-time.After(2 * time.Minute):
		t.Fatal("Close waits for looping wasm callbacks")
	}
	t.Logf("close returned after %v", time.Since(t0))
}

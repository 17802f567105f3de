package broadcast

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/hostd-dev/hostd/runtime/catalog"
	"github.com/hostd-dev/hostd/sdk/abi"
)

// gateType's callback waits until its gate is closed (or its context ends).
const gateType = "Gate"

func gateEnv(t *testing.T, gate <-chan struct{}) *env {
	t.Helper()
	return newEnv(t, vcs(2), nil, func(e *Engine) {
		e.Register(gateType, fnHandler{ack: func(ctx context.Context, c *AckCall) (AckResult, error) {
			select {
			case <-gate:
				return AckResult{}, nil
			case <-ctx.Done():
				return AckResult{}, ctx.Err()
			}
		}}, TypeOptions{})
	})
}

// Same key + same request → the original; same key + different request
// (payload, properties, vchannels) → a conflict naming the original; the
// resource keys, wait mode and vchannel order are not part of the request.
func TestIdempotencyFingerprint(t *testing.T) {
	v := newEnv(t, vcs(3), nil, nil)
	ctx := context.Background()
	base := Request{Message: Message{Type: NoopType, Payload: []byte("a"), Properties: map[string]string{"x": "1", "y": "2"}},
		VChannels: []string{"t/0", "t/1"}, IdempotencyKey: "k", ResourceKeys: []abi.ResourceKey{key("collection", "old", abi.Exclusive)}}
	orig := v.submit(ctx, base)
	same := base
	same.VChannels = []string{"t/1", "t/0", "t/1"}
	same.ResourceKeys = []abi.ResourceKey{key("collection", "renamed", abi.Exclusive)}
	same.Wait = WaitPersisted
	same.Message.Properties = map[string]string{"y": "2", "x": "1"}
	if r := v.submit(ctx, same); r.ID != orig.ID || !r.Duplicate {
		t.Fatalf("same request: %+v, original %d", r, orig.ID)
	}
	for name, mut := range map[string]func(*Request){
		"payload":    func(r *Request) { r.Message.Payload = []byte("b") },
		"property":   func(r *Request) { r.Message.Properties = map[string]string{"x": "1", "y": "3"} },
		"vchannels":  func(r *Request) { r.VChannels = []string{"t/0", "t/2"} },
		"no payload": func(r *Request) { r.Message.Payload = nil },
	} {
		r := base
		mut(&r)
		res, err := v.e.Submit(ctx, &r)
		var ic *IdempotencyConflictError
		if !errors.As(err, &ic) || !errors.Is(err, ErrIdempotencyConflict) || ic.OriginalID != orig.ID || res != nil {
			t.Fatalf("%s differs: %+v, %v", name, res, err)
		}
	}
	// Another type or scope is another key: a new broadcast.
	other := base
	other.Scope = Scope{Kind: "database", ID: "db1"}
	other.Message.Payload = []byte("z")
	if r := v.submit(ctx, other); r.ID == orig.ID || r.Duplicate {
		t.Fatalf("other scope: %+v", r)
	}
	// The fingerprint survives a restart (it is persisted, not recomputed).
	v.restart()
	r := base
	r.Message.Payload = []byte("b")
	if _, err := v.e.Submit(ctx, &r); !errors.Is(err, ErrIdempotencyConflict) {
		t.Fatalf("after restart, different request: %v", err)
	}
	if res := v.submit(ctx, base); res.ID != orig.ID || !res.Duplicate {
		t.Fatalf("after restart, same request: %+v", res)
	}
}

// A record persisted before fingerprints existed matches on the key alone.
func TestIdempotencyLegacyRecordMatchesOnKey(t *testing.T) {
	v := newEnv(t, nil, nil, nil)
	ctx := context.Background()
	orig := v.submit(ctx, Request{Message: Message{Type: NoopType, Payload: []byte("a")}, IdempotencyKey: "old"})
	// Rewrite the record as an older hostd wrote it: no fingerprint.
	var raw map[string]any
	if err := v.store.View(ctx, func(r catalog.Reader) error {
		b, _, err := r.Get(taskKey(orig.ID))
		if err != nil {
			return err
		}
		return json.Unmarshal(b, &raw)
	}); err != nil {
		t.Fatal(err)
	}
	if _, ok := raw["fingerprint"]; !ok {
		t.Fatal("a new record has no fingerprint")
	}
	delete(raw, "fingerprint")
	b, _ := json.Marshal(raw)
	if _, err := v.store.Commit(ctx, &catalog.Batch{Ops: []catalog.Op{{Key: taskKey(orig.ID), Value: b}}}); err != nil {
		t.Fatal(err)
	}
	v.restart()
	res := v.submit(ctx, Request{Message: Message{Type: NoopType, Payload: []byte("different")}, IdempotencyKey: "old"})
	if res.ID != orig.ID || !res.Duplicate {
		t.Fatalf("legacy entry: %+v, original %d", res, orig.ID)
	}
}

// A retry never waits behind locks: the original is in flight (its
// callback waits) holding collection:x, another broadcast queues on
// collection:x; the retry gets the original at once, and a retry with a
// different body gets the conflict at once.
func TestIdempotencyRetryDoesNotQueueOnKeys(t *testing.T) {
	gate := make(chan struct{})
	v := gateEnv(t, gate)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	req := Request{Message: Message{Type: gateType, Payload: []byte("p")}, VChannels: vcs(2),
		ResourceKeys: []abi.ResourceKey{key("collection", "x", abi.Exclusive)}, IdempotencyKey: "op-1", Wait: WaitPersisted}
	orig := v.submit(ctx, req)
	queued := make(chan *Result, 1)
	go func() {
		r, _ := v.e.Submit(ctx, &Request{Message: Message{Type: gateType}, ResourceKeys: []abi.ResourceKey{key("collection", "x", abi.Exclusive)}})
		queued <- r
	}()
	time.Sleep(50 * time.Millisecond) // let it queue on collection:x
	// The retry waits for the original's persisted state, not for keys.
	rctx, rcancel := context.WithTimeout(ctx, time.Minute)
	defer rcancel()
	res, err := v.e.Submit(rctx, &req)
	if err != nil || res.ID != orig.ID || !res.Duplicate || res.State != StatePending {
		t.Fatalf("retry of an in-flight broadcast: %+v, %v", res, err)
	}
	diff := req
	diff.Message.Payload = []byte("other")
	if _, err := v.e.Submit(rctx, &diff); !errors.Is(err, ErrIdempotencyConflict) {
		t.Fatalf("different body: %v", err)
	}
	close(gate)
	if r := <-queued; r == nil || r.State != StateTombstone {
		t.Fatalf("queued broadcast: %+v", r)
	}
	if in := v.waitState(orig.ID, StateTombstone); in.ID != orig.ID {
		t.Fatal(in)
	}
}

// Hammer: many goroutines submit the same key at once, half with one
// body and half with another: exactly one task per key, every request
// with the winner's body gets its ID (one of them not a duplicate), every
// other gets a conflict naming it.
func TestIdempotencyHammer(t *testing.T) {
	v := newEnv(t, vcs(2), nil, nil)
	const keys, per = 8, 16
	for k := range keys {
		var wg sync.WaitGroup
		type out struct {
			body int
			res  *Result
			err  error
		}
		outs := make(chan out, per)
		for i := range per {
			wg.Add(1)
			go func() {
				defer wg.Done()
				body := i % 2
				// Different resource keys too: the reservation, not the
				// locks, serializes them.
				r := Request{Message: Message{Type: NoopType, Payload: []byte{byte(body)}}, VChannels: vcs(2),
					IdempotencyKey: fmt.Sprintf("key-%d", k), ResourceKeys: []abi.ResourceKey{key("collection", fmt.Sprint(i), abi.Exclusive)}}
				res, err := v.e.Submit(context.Background(), &r)
				outs <- out{body, res, err}
			}()
		}
		wg.Wait()
		close(outs)
		winner, winnerBody, originals := uint64(0), -1, 0
		var all []out
		for o := range outs {
			all = append(all, o)
			if o.err == nil {
				if winner != 0 && o.res.ID != winner {
					t.Fatalf("key %d: two tasks %d and %d", k, winner, o.res.ID)
				}
				winner, winnerBody = o.res.ID, o.body
				if !o.res.Duplicate {
					originals++
				}
			}
		}
		if originals != 1 {
			t.Fatalf("key %d: %d originals", k, originals)
		}
		for _, o := range all {
			var ic *IdempotencyConflictError
			switch {
			case o.body == winnerBody && (o.err != nil || o.res.ID != winner):
				t.Fatalf("key %d: same body got %+v, %v", k, o.res, o.err)
			case o.body != winnerBody && (!errors.As(o.err, &ic) || ic.OriginalID != winner):
				t.Fatalf("key %d: other body got %+v, %v", k, o.res, o.err)
			}
		}
	}
	if ts, _ := v.e.List(Filter{}); len(ts) != keys {
		t.Fatalf("%d tasks for %d keys", len(ts), keys)
	}
}

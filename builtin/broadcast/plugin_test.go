package broadcast

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/hostd-dev/hostd/internal/wasmtest"
	"github.com/hostd-dev/hostd/runtime/catalog"
	"github.com/hostd-dev/hostd/runtime/wasm"
	"github.com/hostd-dev/hostd/sdk/abi"
)

// wasmSource adapts runtime/wasm as host/broadcast.go does (tests may not
// import host).
type wasmSource struct{ rt *wasm.Runtime }

func (w wasmSource) Lookup(t string) (Handler, TypeOptions, bool) {
	hs, ok := w.rt.Lookup(t)
	if !ok {
		return nil, TypeOptions{}, false
	}
	return wasmHandler{w.rt, hs}, TypeOptions{}, true
}

type wasmHandler struct {
	rt *wasm.Runtime
	hs wasm.Handlers
}

func (h wasmHandler) ResourceKeys(ctx context.Context, m *Message) ([]abi.ResourceKey, error) {
	if !h.hs.ResourceKeys {
		return nil, nil
	}
	return h.rt.ResourceKeys(ctx, &abi.Message{Type: m.Type, Payload: m.Payload, Properties: m.Properties})
}
func (h wasmHandler) Validate(ctx context.Context, m *Message, r catalog.Reader) error {
	if !h.hs.Validate {
		return nil
	}
	return h.rt.Validate(ctx, &abi.Message{Type: m.Type, Payload: m.Payload, Properties: m.Properties}, r)
}
func (h wasmHandler) Ack(ctx context.Context, c *AckCall) (AckResult, error) {
	env := &abi.Message{ID: c.BroadcastID, Type: c.Message.Type, Payload: c.Message.Payload, Properties: c.Message.Properties,
		Attempt: uint32(c.Attempt), TraceParent: c.TraceParent}
	res, err := h.rt.Ack(ctx, env)
	if err != nil {
		if wasm.IsPermanent(err) {
			return AckResult{}, Permanent(err)
		}
		return AckResult{}, err
	}
	return AckResult{Checks: res.Checks, RangeChecks: res.RangeChecks, Ops: res.Ops}, nil
}

// wasmEnv is an env whose plugin types come from real Wasm plugins.
func wasmEnv(t *testing.T, queues []string, pool int, plugins map[string]string) (*env, func() *wasm.Runtime) {
	return wasmEnvLimits(t, queues, wasm.Limits{PoolSize: pool}, plugins)
}

// wasmEnvLimits is wasmEnv with the plugins' default limits.
func wasmEnvLimits(t *testing.T, queues []string, lim wasm.Limits, plugins map[string]string) (*env, func() *wasm.Runtime) {
	specs := []wasm.Spec{}
	for name, dir := range plugins {
		specs = append(specs, wasm.Spec{Name: name, Path: wasmtest.Build(t, dir)})
	}
	var rt *wasm.Runtime
	v := newEnv(t, queues, func(o *Options) {
		// Loading compiles and instantiates (-race, cold cache, loaded CI
		// machine: a minute was seen to run out).
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		var err error
		rt, err = wasm.New(ctx, wasm.Config{Plugins: specs, CacheDir: wasmtest.CacheDir(), Store: o.Store,
			Defaults: lim,
			Logger:   slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))})
		if err != nil {
			t.Fatal(err)
		}
		o.Handlers = wasmSource{rt}
	}, nil)
	t.Cleanup(func() {
		if rt != nil {
			rt.Close()
		}
	})
	return v, func() *wasm.Runtime { return rt }
}

func pluginKV(t *testing.T, rt *wasm.Runtime, plugin, key string) string {
	v, _, err := rt.KVGet(context.Background(), plugin, []byte(key))
	if err != nil {
		return ""
	}
	return string(v)
}

// Scenario 14 with a real Wasm plugin: 100 concurrent non-conflicting
// broadcasts each increment one shared counter, pool of 4: exactly 100.
func TestScenario14WasmCounter(t *testing.T) {
	v, rt := wasmEnv(t, vcs(1), 4, map[string]string{"counter": "testdata/counter"})
	var wg sync.WaitGroup
	ids := make([]uint64, 100)
	for i := range ids {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			r, err := v.e.Submit(context.Background(), &Request{Message: Message{Type: "Increment"}, VChannels: vcs(1),
				ResourceKeys: []abi.ResourceKey{key("collection", fmt.Sprint(i), abi.Exclusive)}})
			if err != nil || r.State != StateTombstone {
				t.Errorf("%+v %v", r, err)
				return
			}
			ids[i] = r.ID
		}(i)
	}
	wg.Wait()
	if got := pluginKV(t, rt(), "counter", "counter"); got != "100" {
		t.Fatalf("counter = %q, want 100", got)
	}
	conflicts := 0
	for _, id := range ids {
		if s := pluginKV(t, rt(), "counter", "seen/"+strconv.FormatUint(id, 10)); s != "1" {
			t.Fatalf("broadcast %d applied %q times", id, s)
		}
		in, _ := v.e.Get(id)
		conflicts += in.Conflicts
	}
	t.Logf("conflict re-runs: %d", conflicts)
}

// Scenario 13: a retried CreateCollection (same idempotency key) after the
// original succeeded returns the original ID, not the validator's
// "already exists"; a new request without the key is rejected by it.
func TestScenario13RetriedCreateCollection(t *testing.T) {
	v, rt := wasmEnv(t, vcs(2), 2, map[string]string{"collections": "../../plugins/collections"})
	ctx := context.Background()
	db := v.submit(ctx, Request{Message: Message{Type: "CreateDatabase", Payload: []byte(`{"name":"shop"}`)}})
	if db.State != StateTombstone {
		t.Fatalf("CreateDatabase: %+v", db)
	}
	req := Request{Message: Message{Type: "CreateCollection", Payload: []byte(`{"db":"shop","name":"orders","shards":2}`)},
		VChannels: vcs(2), IdempotencyKey: "create-orders-1", Scope: Scope{Kind: "database", ID: "shop"}}
	a := v.submit(ctx, req)
	if a.State != StateTombstone || a.Duplicate {
		t.Fatalf("original: %+v", a)
	}
	in, _ := v.e.Get(a.ID)
	want := map[string]bool{"database:shop:shared": false, "collection:shop.orders:exclusive": false}
	for _, k := range in.ResourceKeys {
		want[k.Domain+":"+k.Key+":"+k.Mode.String()] = true
	}
	for k, ok := range want {
		if !ok {
			t.Fatalf("plugin-declared key %s missing from %+v", k, in.ResourceKeys)
		}
	}
	b := v.submit(ctx, req)
	if b.ID != a.ID || !b.Duplicate || b.State != StateTombstone {
		t.Fatalf("retry: %+v, want duplicate of %d", b, a.ID)
	}
	req.IdempotencyKey = ""
	if _, err := v.e.Submit(ctx, &req); err == nil {
		t.Fatal("a new CreateCollection of an existing collection must be rejected by the validator")
	}
	var rec struct {
		ID int `json:"id"`
	}
	if err := json.Unmarshal([]byte(pluginKV(t, rt(), "collections", "coll/shop/orders")), &rec); err != nil || rec.ID == 0 {
		t.Fatalf("collection record: %v", err)
	}
	if n := pluginKV(t, rt(), "collections", "count/shop"); n != "1" {
		t.Fatalf("count/shop = %q, want 1", n)
	}
}

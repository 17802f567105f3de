package main

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/hostd-dev/hostd/internal/wasmtest"
	"github.com/hostd-dev/hostd/runtime/catalog"
	"github.com/hostd-dev/hostd/runtime/wasm"
	"github.com/hostd-dev/hostd/sdk/abi"
	"github.com/hostd-dev/hostd/sdk/sdktest"
)

// wasmRuntime builds this plugin for wasip1, opens a real Badger catalog in
// a temp dir and loads the plugin into runtime/wasm.
func wasmRuntime(t *testing.T) (*wasm.Runtime, catalog.Store) {
	t.Helper()
	if testing.Short() {
		t.Skip("builds and runs the Wasm plugin (-short)")
	}
	path := wasmtest.Build(t, ".")
	store, err := catalog.Open(catalog.DefaultOptions(filepath.Join(t.TempDir(), "catalog")))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute) // compile + instantiate under -race and load
	defer cancel()
	rt, err := wasm.New(ctx, wasm.Config{
		Plugins:  []wasm.Spec{{Name: "collections", Path: path}},
		CacheDir: wasmtest.CacheDir(),
		Store:    store,
		Defaults: wasm.Limits{PoolSize: 1},
		Logger:   slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn + 1})),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rt.Close() })
	return rt, store
}

// code maps a runtime error to the handler's result code.
func code(t *testing.T, err error) abi.Code {
	t.Helper()
	switch wasm.KindOf(err) {
	case "":
		if err != nil {
			t.Fatalf("not a plugin error: %v", err)
		}
		return abi.CodeOK
	case wasm.KindPermanent:
		return abi.CodePermanent
	case wasm.KindRetryable:
		return abi.CodeRetryable
	}
	t.Fatalf("plugin failed: %v", err)
	return 0
}

func message(t *testing.T, err error) string {
	var pe *wasm.PluginError
	if errors.As(err, &pe) {
		return pe.Message
	}
	return ""
}

// kvMap reads the plugin's whole KV from the catalog.
func kvMap(t *testing.T, rt *wasm.Runtime) map[string]string {
	t.Helper()
	m := map[string]string{}
	var after []byte
	for {
		entries, next, err := rt.KVScan(context.Background(), "collections", nil, after, 1000)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range entries {
			m[string(e.Key)] = string(e.Value)
		}
		if len(next) == 0 {
			return m
		}
		after = next
	}
}

// TestWasmMatchesSDKTest is the acceptance test: the same message sequence
// through sdktest (native) and through the Wasm build in runtime/wasm, with
// a real catalog, gives the same validator and ack results, error
// messages, resource keys and KV after every step. The ack callback's
// staged writes are committed here, as the broadcast engine does, with
// the checks of what the callback read.
func TestWasmMatchesSDKTest(t *testing.T) {
	rt, store := wasmRuntime(t)
	h := sdktest.New(t)
	ctx := context.Background()
	for i, s := range sequence {
		payload := []byte(s.payload)
		nv := h.Validate(s.typ, payload)
		werr := rt.Validate(ctx, &abi.Message{Type: s.typ, Payload: payload}, nil)
		if nv.Code != s.validate || code(t, werr) != nv.Code || message(t, werr) != nv.Message {
			t.Fatalf("step %d %s %s: validate native %v, wasm %v (want %s)", i, s.typ, s.payload, nv, werr, s.validate)
		}

		nkeys, nres := h.ResourceKeys(s.typ, payload)
		wkeys, werr := rt.ResourceKeys(ctx, &abi.Message{Type: s.typ, Payload: payload})
		if code(t, werr) != nres.Code || message(t, werr) != nres.Message || !cmp.Equal(nkeys, wkeys) {
			t.Fatalf("step %d: resource keys native %v %v, wasm %v %v", i, nkeys, nres, wkeys, werr)
		}

		m := h.Msg(s.typ, payload)
		na := h.AckMessage(m)
		res, werr := rt.Ack(ctx, &abi.Message{ID: m.ID, Type: s.typ, Payload: payload, Attempt: 1})
		if na.Code != s.ack || code(t, werr) != na.Code || message(t, werr) != na.Message {
			t.Fatalf("step %d %s %s: ack native %v, wasm %v (want %s)", i, s.typ, s.payload, na, werr, s.ack)
		}
		if werr == nil {
			// The Wasm result also carries the namespace's usage record
			// (pkv/collections, the KV quota's exact count), which sdktest
			// does not keep: compare the plugin's own ops.
			if own := pluginOps(res.Ops); own != len(na.Ops) {
				t.Fatalf("step %d: wasm staged %d ops of its own, native %d", i, own, len(na.Ops))
			}
			if _, err := store.Commit(ctx, &catalog.Batch{Checks: res.Checks, RangeChecks: res.RangeChecks, Ops: res.Ops}); err != nil {
				t.Fatalf("step %d: commit: %v", i, err)
			}
		}
		if d := cmp.Diff(h.KV().Map(), kvMap(t, rt)); d != "" {
			t.Fatalf("step %d %s %s: KV differs (-native +wasm):\n%s", i, s.typ, s.payload, d)
		}
	}
	if d := cmp.Diff(wantFinal, kvMap(t, rt)); d != "" {
		t.Fatalf("final KV (-want +wasm):\n%s", d)
	}
}

// TestWasmStaleAckConflicts shows why the caller commits the reads too: two
// callbacks computed from the same state cannot both commit.
func TestWasmStaleAckConflicts(t *testing.T) {
	rt, store := wasmRuntime(t)
	ctx := context.Background()
	a, err := rt.Ack(ctx, &abi.Message{ID: 1, Type: TypeCreateDatabase, Payload: []byte(`{"name":"a"}`), Attempt: 1})
	if err != nil {
		t.Fatal(err)
	}
	b, err := rt.Ack(ctx, &abi.Message{ID: 2, Type: TypeCreateDatabase, Payload: []byte(`{"name":"b"}`), Attempt: 1})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := store.Commit(ctx, &catalog.Batch{Checks: a.Checks, RangeChecks: a.RangeChecks, Ops: a.Ops}); err != nil {
		t.Fatal(err)
	}
	// b read "seq" before a committed: its commit must conflict (both would
	// otherwise get id 1).
	if _, err := store.Commit(ctx, &catalog.Batch{Checks: b.Checks, RangeChecks: b.RangeChecks, Ops: b.Ops}); !errors.Is(err, catalog.ErrConflict) {
		t.Fatalf("stale commit: %v", err)
	}
	// Re-running b's callback gives id 2.
	b, err = rt.Ack(ctx, &abi.Message{ID: 2, Type: TypeCreateDatabase, Payload: []byte(`{"name":"b"}`), Attempt: 2})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := store.Commit(ctx, &catalog.Batch{Checks: b.Checks, RangeChecks: b.RangeChecks, Ops: b.Ops}); err != nil {
		t.Fatal(err)
	}
	if got := kvMap(t, rt)["db/b"]; got != `{"id":2,"name":"b"}` {
		t.Fatalf("db/b = %s", got)
	}
}

// pluginOps counts the ops on keys inside the collections plugin's KV
// namespace (pkv/collections/...), leaving out the host's usage record.
func pluginOps(ops []catalog.Op) int {
	n := 0
	for _, op := range ops {
		if bytes.HasPrefix(op.Key, []byte("pkv/collections/")) {
			n++
		}
	}
	return n
}

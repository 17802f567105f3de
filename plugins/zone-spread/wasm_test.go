package main

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/hostd-dev/hostd/internal/wasmtest"
	"github.com/hostd-dev/hostd/runtime/wasm"
	"github.com/hostd-dev/hostd/sdk/abi"
)

// TestPolicyThroughRuntime runs the Wasm build of the policy in
// runtime/wasm: the same answers as Spread natively, the label setting
// from the plugin config, and input errors as permanent plugin errors.
func TestPolicyThroughRuntime(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the Wasm plugin (-short)")
	}
	path := wasmtest.Build(t, ".")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute) // compile + instantiate under -race and load
	defer cancel()
	rt, err := wasm.New(ctx, wasm.Config{
		Plugins: []wasm.Spec{
			{Name: "zone-spread", Path: path},
			{Name: "rack-spread", Path: path, Config: map[string]string{"label": "rack"}},
		},
		CacheDir: wasmtest.CacheDir(),
		Logger:   slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	// Both register the policy "zone-spread": a load error naming both,
	// and the first one still serves.
	if err == nil {
		t.Fatal("two plugins with one policy loaded without error")
	}
	if rt == nil || !strings.Contains(err.Error(), "zone-spread") || !strings.Contains(err.Error(), "rack-spread") {
		t.Fatalf("load error should name both plugins: %v", err)
	}
	rt.Close()

	// The label comes from the plugin config.
	rt, err = wasm.New(ctx, wasm.Config{
		Plugins:  []wasm.Spec{{Name: "zone-spread", Path: path, Config: map[string]string{"label": "rack"}}},
		CacheDir: wasmtest.CacheDir(),
		Logger:   slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close()
	if !rt.HasPolicy(PolicyName) {
		t.Fatal("policy not registered")
	}
	inputs := []abi.PolicyInput{
		{Operation: "create", Topic: "t", Queues: 8, Brokers: brokers("a1@a", "a2@a", "b1@b", "c1@c")},
		{Operation: "remap", Topic: "t", Queues: 6, Current: at("a1", "b1", "a1", "b1", "a1", "b1"), Brokers: brokers("a1@a", "b1@b", "c1@c")},
		{Operation: "grow", Topic: "t", Queues: 64, Current: at("a1", "b1"), Brokers: brokers("a1@a", "a2@a", "b1@b", "b2@b", "c1@c")},
	}
	for i, in := range inputs {
		for j := range in.Brokers {
			in.Brokers[j].Labels = map[string]string{"rack": in.Brokers[j].Labels["zone"]}
		}
		want, err := Spread(in, "rack")
		if err != nil {
			t.Fatal(err)
		}
		got, err := rt.Policy(ctx, PolicyName, &in)
		if err != nil {
			t.Fatalf("input %d: %v", i, err)
		}
		if d := cmp.Diff(want, got); d != "" {
			t.Fatalf("input %d: wasm differs from native (-native +wasm):\n%s", i, d)
		}
	}
	_, err = rt.Policy(ctx, PolicyName, &abi.PolicyInput{Queues: 1, Brokers: []abi.Broker{{Name: "x"}}})
	if !wasm.IsPermanent(err) || wasm.KindOf(err) != wasm.KindPermanent {
		t.Fatalf("broker without label: %v", err)
	}
}

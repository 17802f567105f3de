package host

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hostd-dev/hostd/client"
	"github.com/hostd-dev/hostd/host/config"
	"github.com/hostd-dev/hostd/internal/wasmtest"
	"github.com/hostd-dev/hostd/sdk/abi"
)

// A plugin takes a lease through the daemon's lease service and writes
// fenced KV in an ack callback; the broadcast engine commits the write
// (with the fence's check) with the TOMBSTONE. Validators may not take
// leases, and a key an operator holds is reported as locked with the
// holder's owner.
func TestPluginLeasesThroughTheDaemon(t *testing.T) {
	cfg := testConfig(t)
	cfg.Broadcast.Vchannels = []string{"t/0"}
	cfg.Plugins.List = []config.Plugin{{Name: "leases", Path: wasmtest.Build(t, "../runtime/wasm/testdata/leases")}}
	if err := os.Symlink(wasmtest.CacheDir(), filepath.Join(cfg.Data.Dir, "wasm-cache")); err != nil {
		t.Fatal(err)
	}
	h := startHost(t, cfg)
	c, err := client.New(h.URL())
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	send := func(payload string) (*client.BroadcastResult, error) {
		return c.SubmitBroadcast(ctx, &client.BroadcastRequest{Type: "Lease", PayloadText: payload, VChannels: []string{"t/0"}})
	}
	res, err := send(`{"op":"fenced","lock":"x","key":"k","value":"v1","ttl_ms":60000}`)
	if err != nil || res.State != "TOMBSTONE" {
		t.Fatalf("fenced broadcast: %+v %v", res, err)
	}
	kv, err := c.GetPluginKV(ctx, "leases", "k")
	if err != nil || kv.ValueText == nil || *kv.ValueText != "v1" {
		t.Fatalf("fenced write: %+v %v", kv, err)
	}
	view, err := h.leases.Inspect(abi.ResourceKey{Domain: "job", Key: "x"})
	if err != nil || len(view.Holders) != 1 || view.Holders[0].Owner != "leases" || view.Holders[0].Meta["plugin"] != "leases" {
		t.Fatalf("the plugin's grant: %+v %v", view, err)
	}

	_, err = send(`{"op":"acquire","lock":"y"}`)
	if err == nil || !strings.Contains(err.Error(), "[read_only]") {
		t.Fatalf("a validator taking a lease: %v", err)
	}
	if list := h.leases.List(0, 10); len(list) != 1 {
		t.Fatalf("grants after the rejected broadcast: %+v", list)
	}
}

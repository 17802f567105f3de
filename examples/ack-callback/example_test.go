package ackcallback

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hostd-dev/hostd/client"
	"github.com/hostd-dev/hostd/host"
	"github.com/hostd-dev/hostd/host/config"
	"github.com/hostd-dev/hostd/internal/wasmtest"
)

// TestExample runs the example end to end: the plugin built to Wasm and
// dropped into the plugin directory, the real daemon started in-process
// from hostd.yaml (listen address and data directory moved into the
// test), broadcasts submitted through the Go client, the plugin KV read
// back through the API.
func TestExample(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the plugin and runs the daemon (-short)")
	}
	wasmFile := wasmtest.Build(t, "plugin")
	dir := t.TempDir()
	pluginDir := filepath.Join(dir, "plugins")
	if err := os.MkdirAll(pluginDir, 0o755); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(wasmFile)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(pluginDir, "tenants.wasm"), b, 0o644); err != nil {
		t.Fatal(err)
	}

	cfg, err := config.Load(config.Source{File: "hostd.yaml", Env: []string{}, Flags: map[string]any{
		"api.listen":  "127.0.0.1:0",
		"data.dir":    filepath.Join(dir, "data"),
		"plugins.dir": pluginDir,
	}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute) // compiles the plugin: slow under -race and load
	defer cancel()
	h, err := host.Open(ctx, cfg, host.Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	if err := h.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := h.Shutdown(context.Background()); err != nil {
			t.Error(err)
		}
	}()
	c, err := client.New(h.URL())
	if err != nil {
		t.Fatal(err)
	}

	// hostd plugin ls
	var plugins struct {
		Items []struct {
			Name          string `json:"name"`
			SHA256        string `json:"sha256"`
			Registrations []struct{ Kind, Name string }
		} `json:"items"`
	}
	if err := c.Do(ctx, "GET", "/v1/plugins", nil, &plugins); err != nil {
		t.Fatal(err)
	}
	if len(plugins.Items) != 1 || plugins.Items[0].Name != "tenants" || plugins.Items[0].SHA256 == "" || len(plugins.Items[0].Registrations) != 2 {
		t.Fatalf("plugin ls: %+v", plugins)
	}

	// hostd broadcast send UpsertTenant tenants/0 tenants/1 --payload ...
	send := func(payload string) (*client.BroadcastResult, error) {
		return c.SubmitBroadcast(ctx, &client.BroadcastRequest{Type: "UpsertTenant",
			VChannels: []string{"tenants/0", "tenants/1"}, PayloadText: payload, Wait: "done"})
	}
	var last uint64
	for i, plan := range []string{"free", "enterprise"} {
		res, err := send(`{"tenant":"acme","plan":"` + plan + `"}`)
		if err != nil {
			t.Fatalf("broadcast %d: %v", i, err)
		}
		if res.State != "TOMBSTONE" || res.TimedOut {
			t.Fatalf("broadcast %d: %+v", i, res)
		}
		last = res.ID
	}
	// The validator refuses an unknown plan before anything is persisted.
	if _, err := send(`{"tenant":"acme","plan":"platinum"}`); err == nil || !strings.Contains(err.Error(), `unknown plan "platinum"`) {
		t.Fatalf("unknown plan: %v", err)
	}

	// hostd plugin kv get tenants tenant/acme
	var kv struct {
		Key       string `json:"key"`
		ValueText string `json:"value_text"`
	}
	if err := c.Do(ctx, "GET", "/v1/plugins/tenants/kv/tenant/acme", nil, &kv); err != nil {
		t.Fatal(err)
	}
	var tenant struct {
		Name      string            `json:"name"`
		Plan      string            `json:"plan"`
		Broadcast uint64            `json:"broadcast"`
		Offsets   map[string]uint64 `json:"offsets"`
		Updates   int               `json:"updates"`
	}
	if err := json.Unmarshal([]byte(kv.ValueText), &tenant); err != nil {
		t.Fatalf("tenant record %q: %v", kv.ValueText, err)
	}
	if tenant.Plan != "enterprise" || tenant.Updates != 2 || tenant.Broadcast != last {
		t.Fatalf("tenant record: %+v", tenant)
	}
	// Offsets of the second broadcast on each vchannel (the control
	// channel, which every broadcast includes, is listed too).
	if tenant.Offsets["tenants/0"] != 1 || tenant.Offsets["tenants/1"] != 1 {
		t.Fatalf("offsets of the second broadcast: %v", tenant.Offsets)
	}
}

package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestPluginListFromYAML(t *testing.T) {
	f := filepath.Join(t.TempDir(), "hostd.yaml")
	yaml := `
plugins:
  kv_max_keys: 10
  list:
    - name: collections
      config: {max_collections: "100", mode: strict}
      call_timeout: 2s
      memory_limit: 32MiB
      pool_size: 3
    - path: /opt/plugins/zone-spread.wasm
      kv_max_bytes: 1MiB
`
	if err := os.WriteFile(f, []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg, err := Load(Source{File: f, Env: []string{}})
	if err != nil {
		t.Fatal(err)
	}
	p := cfg.Plugins
	if p.KVMaxKeys != 10 || len(p.List) != 2 {
		t.Fatalf("plugins = %+v", p)
	}
	c := p.List[0]
	if c.Name != "collections" || c.Config["max_collections"] != "100" || c.Config["mode"] != "strict" ||
		c.CallTimeout != 2*time.Second || c.MemoryLimit != 32<<20 || c.PoolSize != 3 {
		t.Fatalf("list[0] = %+v", c)
	}
	if z := p.List[1]; z.Path != "/opt/plugins/zone-spread.wasm" || z.KVMaxBytes != 1<<20 {
		t.Fatalf("list[1] = %+v", z)
	}
}

func TestPluginListProblems(t *testing.T) {
	cfg := Default()
	cfg.Plugins.List = []Plugin{{}, {Name: "Bad Name"}, {Name: "a"}, {Name: "a", PoolSize: -1, MemoryLimit: 1}, {Name: "b", Interrupt: "sometimes"}}
	cfg.Plugins.KVMaxKeys = 0
	err := cfg.Validate()
	if err == nil {
		t.Fatal("invalid plugin list accepted")
	}
	for _, want := range []string{"plugins.list[0]: name or path is required", "plugins.list[1].name", `"a" is listed twice`,
		"plugins.list[3].pool_size", "plugins.list[3].memory_limit", "plugins.kv_max_keys", `plugins.list[4].interrupt: must be "auto" or "close-on-context-done", got "sometimes"`} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q:\n%v", want, err)
		}
	}
}

// plugins.init_timeout: 10s by default, from the environment, validated.
func TestPluginInitTimeout(t *testing.T) {
	if d := Default().Plugins.InitTimeout; d != 10*time.Second {
		t.Fatalf("default init_timeout %v", d)
	}
	cfg, err := Load(Source{Env: []string{"HOSTD_PLUGINS__INIT_TIMEOUT=3s"}})
	if err != nil || cfg.Plugins.InitTimeout != 3*time.Second {
		t.Fatalf("from env: %v, %v", cfg, err)
	}
	for _, bad := range []time.Duration{0, -time.Second, 11 * time.Minute} {
		cfg := Default()
		cfg.Plugins.InitTimeout = bad
		if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "plugins.init_timeout: must be > 0 and <= 10m") {
			t.Errorf("%v: %v", bad, err)
		}
	}
}

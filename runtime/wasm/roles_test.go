package wasm

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hostd-dev/hostd/sdk/abi"
)

// A message type's required API role travels in register's kind argument
// (bits 8..15): sdk.RequireRole in a Go plugin, the raw bits from any
// other language. Lookup and List report it; no declaration means write
// (plugins built before roles existed keep working); a role hostd does
// not know is a load error.
func TestMessageTypeRoles(t *testing.T) {
	r := mustRuntime(t, Config{Plugins: []Spec{{Name: "echo", Path: echoWasm(t)}}, Defaults: Limits{PoolSize: 1}})
	if h, ok := r.Lookup("AdminOnly"); !ok || h.Role != abi.RoleAdmin {
		t.Fatalf("AdminOnly: %+v", h)
	}
	if h, ok := r.Lookup("Echo"); !ok || h.Role != abi.RoleWrite {
		t.Fatalf("Echo: %+v", h)
	}
	roles := map[string]string{}
	for _, rg := range r.List()[0].Registrations {
		roles[rg.Kind+" "+rg.Name] = rg.Role
	}
	if roles["ack AdminOnly"] != "admin" || roles["ack Echo"] != "write" || roles["validator Echo"] != "write" || roles["policy round-robin"] != "" {
		t.Fatalf("List roles: %v", roles)
	}

	dir := t.TempDir()
	load := func(name string, kind int32) (*Runtime, error) {
		path := filepath.Join(dir, name+".wasm")
		if err := os.WriteFile(path, rawModuleWith(kind, 1024), 0o644); err != nil {
			t.Fatal(err)
		}
		return newRuntime(t, Config{Plugins: []Spec{{Name: name, Path: path, Limits: Limits{MemoryLimit: 1 << 20}}}, Defaults: Limits{PoolSize: 1}})
	}
	rr, err := load("rawadmin", abi.RegisterKind(abi.KindAck, abi.RoleAdmin))
	if err != nil {
		t.Fatal(err)
	}
	if h, ok := rr.Lookup("RawTrap"); !ok || h.Role != abi.RoleAdmin {
		t.Fatalf("raw admin type: %+v", h)
	}
	for name, kind := range map[string]int32{"rawread": int32(abi.KindAck) | 1<<8, "rawhigh": int32(abi.KindAck) | 1<<16, "rawfour": int32(abi.KindAck) | 4<<8} {
		_, err := load(name, kind)
		if err == nil || !strings.Contains(err.Error(), "unknown handler kind") || !strings.Contains(err.Error(), "role") {
			t.Fatalf("%s (%#x): %v, want a load error naming the role bits", name, kind, err)
		}
	}
}

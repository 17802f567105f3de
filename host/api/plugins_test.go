package api

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/hostd-dev/hostd/runtime/catalog"
	"github.com/hostd-dev/hostd/runtime/wasm"
	"github.com/hostd-dev/hostd/sdk/abi"
)

// faultyPlugins injects the runtime's error cases (the real runtime is
// tested through the daemon in host/plugins_test.go).
type faultyPlugins struct{ reloadErr error }

func (f *faultyPlugins) List() []wasm.Info {
	return []wasm.Info{{Name: "a", ABI: 1}, {Name: "b", ABI: 1}, {Name: "c", Error: "broken"}}
}
func (f *faultyPlugins) Reload(context.Context) error { return f.reloadErr }
func (f *faultyPlugins) KVGet(_ context.Context, p string, k []byte) ([]byte, catalog.Version, error) {
	if !wasm.ValidName(p) {
		return nil, 0, fmt.Errorf("%w: invalid plugin name %q", wasm.ErrNotFound, p)
	}
	if string(k) == "dir/key" {
		return []byte{0xff, 0x00}, 7, nil
	}
	return nil, 0, catalog.ErrNotFound
}
func (f *faultyPlugins) KVScan(context.Context, string, []byte, []byte, int) ([]abi.KVPair, []byte, error) {
	return []abi.KVPair{{Key: []byte("k"), Value: []byte("v")}}, []byte("k"), nil
}

func TestPluginRoutes(t *testing.T) {
	svc := &faultyPlugins{}
	s := start(t, Options{}, func(s *Server) { RegisterPlugins(s, svc) })

	r := do(t, s, "GET", "/v1/plugins?limit=2", "", "")
	if r.Status != 200 || len(r.Body["items"].([]any)) != 2 || r.Body["next_page_token"] == "" {
		t.Fatalf("list page 1: %d %s", r.Status, r.Raw)
	}
	r = do(t, s, "GET", "/v1/plugins?limit=2&page_token="+r.Body["next_page_token"].(string), "", "")
	if items := r.Body["items"].([]any); r.Status != 200 || len(items) != 1 || items[0].(map[string]any)["error"] != "broken" || r.Body["next_page_token"] != "" {
		t.Fatalf("list page 2: %d %s", r.Status, r.Raw)
	}

	r = do(t, s, "GET", "/v1/plugins/a/kv/dir/key", "", "")
	if r.Status != 200 || r.Body["key"] != "dir/key" || r.Body["value"] != "/wA=" || r.Body["value_text"] != nil || r.Body["version"] != 7.0 {
		t.Fatalf("kv get: %d %s", r.Status, r.Raw)
	}
	if r = do(t, s, "GET", "/v1/plugins/a/kv/nope", "", ""); r.Status != 404 {
		t.Fatalf("kv get missing: %d %s", r.Status, r.Raw)
	}
	if r = do(t, s, "GET", "/v1/plugins/BAD/kv/x", "", ""); r.Status != 400 {
		t.Fatalf("bad name: %d %s", r.Status, r.Raw)
	}
	r = do(t, s, "GET", "/v1/plugins/a/kv?prefix=k&limit=1", "", "")
	if r.Status != 200 || r.Body["next_page_token"] == "" || r.Body["items"].([]any)[0].(map[string]any)["value_text"] != "v" {
		t.Fatalf("kv scan: %d %s", r.Status, r.Raw)
	}

	svc.reloadErr = fmt.Errorf("%w: reload refused: it would remove the ack callback of message type(s) X", wasm.ErrInUse)
	if r = do(t, s, "POST", "/v1/plugins/reload", "", ""); r.Status != 412 || r.Body["error"].(map[string]any)["code"] != CodePluginInUse {
		t.Fatalf("reload in use: %d %s", r.Status, r.Raw)
	}
	svc.reloadErr = errors.Join(&wasm.LoadError{Plugin: "c", Path: "/p/c.wasm", Err: errors.New("missing export hostd_alloc")})
	r = do(t, s, "POST", "/v1/plugins/reload", "", "")
	if r.Status != 200 || len(r.Body["errors"].([]any)) != 1 || len(r.Body["items"].([]any)) != 3 {
		t.Fatalf("reload with a broken file: %d %s", r.Status, r.Raw)
	}
	svc.reloadErr = nil
	if r = do(t, s, "POST", "/v1/plugins/reload", "", ""); r.Status != 200 || len(r.Body["errors"].([]any)) != 0 {
		t.Fatalf("reload: %d %s", r.Status, r.Raw)
	}
}

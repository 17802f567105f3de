package wasm

import "testing"

// PolicyPlugin names the plugin serving a policy (the mapping names it in
// errors about the policy's output), under the plugin's configured name.
func TestPolicyPlugin(t *testing.T) {
	r := mustRuntime(t, Config{Plugins: []Spec{{Name: "placer", Path: echoWasm(t)}}, Store: openStore(t),
		Defaults: Limits{PoolSize: 1}})
	if p, ok := r.PolicyPlugin("round-robin"); !ok || p != "placer" {
		t.Fatalf("PolicyPlugin(round-robin) = %q, %v", p, ok)
	}
	if p, ok := r.PolicyPlugin("Echo"); ok {
		t.Fatalf("a message type is not a policy: %q", p)
	}
	if _, ok := r.PolicyPlugin("nope"); ok {
		t.Fatal("unknown policy found")
	}
}

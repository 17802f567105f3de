// Package sdktest runs a plugin's handlers natively in `go test`, with an
// in-memory KV, config, recorded logs and span events: plugin authors test
// their handlers without building WebAssembly.
//
//	func TestCreate(t *testing.T) {
//		h := sdktest.New(t)
//		h.SetConfig("max_len", "10")
//		res := h.Ack("CreateCollection", []byte(`{"db":"d","name":"c"}`))
//		if !res.OK() {
//			t.Fatal(res)
//		}
//		v, ok := h.KV().Get("coll/d/c")
//		...
//		if !h.Logged("created") { ... }
//	}
//
// The handlers are the ones the plugin's init functions registered with
// sdk.OnAck, sdk.OnValidate, sdk.ResourceKeys and sdk.Policy. A Harness
// calls them through sdk.Dispatch, which encodes and decodes the same ABI
// envelopes as the Wasm build, and serves the host services through
// sdk.SetBackend. Semantics follow hostd's runtime:
//
//   - An ack callback's KV writes are staged: the callback reads its own
//     writes; the harness commits them to the KV only if the callback
//     returns nil, and drops them otherwise (a failed attempt leaves no KV
//     effects). Result.Ops shows what was staged either way.
//   - Validators, resource-key functions and policies get read-only KV:
//     writes fail with an error wrapping sdk.ErrReadOnly.
//   - An optional quota (SetQuota) makes writes fail with sdk.ErrQuota.
//   - A panic in a handler is a permanent failure carrying its message.
//   - Lease locks (sdk.AcquireLease, Renew, Release, CheckFence,
//     KVPutFenced) are served in memory: all-or-nothing without waiting,
//     a fence per key that grows with every grant, TTLs on the harness
//     clock (SetNow); Leases lists the live ones.
//
// The SDK's native backend is process-wide, so only one Harness can be
// active at a time: do not combine sdktest with t.Parallel. New fails the
// test if another Harness is still active.
package sdktest

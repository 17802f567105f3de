// Package sdk is the Go SDK for hostd plugins (ABI v1). A plugin is a Go
// main package built for WebAssembly:
//
//	GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -o myplugin.wasm .
//
// It registers its handlers from init (the host runs the module's
// initializer once per instance and records what was registered):
//
//	func init() {
//		sdk.OnAck("CreateCollection", createCollection)      // ack callback
//		sdk.OnValidate("CreateCollection", validateCreate)   // optional validator
//		sdk.ResourceKeys("CreateCollection", createKeys)     // optional lock keys
//		sdk.Policy("zone-spread", zoneSpread)                // mapping policy
//	}
//
//	func main() {} // required by Go, never called
//
// # Handlers
//
//	type AckFunc          func(m sdk.Message) error
//	type ValidateFunc     func(m sdk.Message) error
//	type ResourceKeysFunc func(m sdk.Message) ([]abi.ResourceKey, error)
//	type PolicyFunc       func(in sdk.PolicyInput) (sdk.PolicyOutput, error)
//
// An ack callback runs once every vchannel of a broadcast of its message
// type has acked. Its KV writes are staged: reads see them, and the host
// commits them atomically together with the broadcast's completion (and
// re-runs the callback if a key it read changed meanwhile). A failed
// attempt leaves no KV effects, so a callback's KV state changes happen
// exactly once. External side effects are at-least-once: use m.ID and
// m.Attempt to deduplicate them.
//
// A validator runs before a broadcast is persisted, under its locks;
// returning an error rejects the broadcast with that message. A
// resource-key function names the keys a message must lock (e.g. exclusive
// collection:<db>.<name> plus shared database:<db>). A policy places logic
// queues on brokers. These three get read-only KV (writes fail with
// ErrReadOnly).
//
// A handler's error is retryable unless wrapped with Permanent: the host
// retries an ack callback with backoff, but a permanent error fails the
// broadcast for good. A panic in a handler is reported with its message and
// the instance is discarded.
//
// # Message access
//
// Message carries the broadcast ID, type, payload, properties, vchannels
// with their append results, the attempt number and the W3C traceparent.
// m.Decode(&v) unmarshals a JSON payload; Property(name) reads a property.
//
// # Host services
//
//	sdk.KVGet(key) ([]byte, bool, error)       // the plugin's own namespace
//	sdk.KVPut(key, value) error                 // quota: ErrQuota
//	sdk.KVDelete(key) error
//	sdk.KVScan(prefix, after, limit) ([]KV, more bool, err error)
//	sdk.Config(key) (string, bool)              // per-plugin settings from hostd's config
//	sdk.Debug/Info/Warn/Error(msg, key, value, ...) // hostd's log, tagged with the plugin
//	sdk.SpanEvent(name, key, value, ...)        // on the current call's span
//	sdk.SpanAttr(key, value)
//	sdk.Now() time.Time                         // real wall clock
//
// # Lease locks and fences
//
//	l, err := sdk.AcquireLease(keys, ttl)        // all or nothing, never waits: ErrLocked
//	fence, _ := l.FenceOf("job", "x")
//	err = sdk.KVPutFenced(key, value, lockKey, fence) // commits only while fence is current
//	err = l.Renew(ttl)                           // ErrExpired once the TTL passed
//	err = l.Release()                            // ErrNotHolder if it went to someone else
//	err = sdk.CheckFence(lockKey, fence)         // ErrNotHolder when stale
//
// A plugin's leases are hostd's lease-lock grants (owner: the plugin's
// name unless LeaseRequest.Owner is set). Acquire, renew, release and
// fenced puts are for ack callbacks; the other handlers are read-only and
// may only CheckFence. A fenced put's fence is re-checked in the
// transaction that commits the callback's writes: a lease lost in between
// makes the commit conflict, nothing is written and the callback runs
// again. Acquiring never blocks (a host call must not hold the instance);
// return the ErrLocked error and the callback is retried with backoff.
//
// Handlers of one instance run one at a time; the host runs several
// instances of a plugin concurrently, so package-level variables are
// per-instance caches, never shared state: keep state in KV.
//
// # Native builds and sdktest
//
// The same API builds for the host (no wasip1 tag), so `go test` and
// `go vet` compile plugins natively. There the host services are served by
// a Backend installed with SetBackend, and Dispatch runs a registered
// handler through the same envelope decoding as the Wasm build. Both exist
// for sdk/sdktest, which provides an in-memory KV, config and recorded logs;
// plugin authors use sdktest rather than these hooks.
//
// The byte-level ABI behind this API is in docs/plugin-abi.md and package
// sdk/abi.
package sdk

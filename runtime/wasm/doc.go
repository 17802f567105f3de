// Package wasm runs hostd's WebAssembly plugins (ABI v1, see sdk/abi and
// docs/plugin-abi.md) on wazero. It is the only package that imports
// wazero.
//
// # Using it
//
//	rt, err := wasm.New(ctx, wasm.Config{
//		Dir:      "/var/lib/hostd/plugins",     // every *.wasm is a plugin
//		Plugins:  []wasm.Spec{{Name: "collections", Config: map[string]string{"x": "y"}}},
//		CacheDir: "/var/lib/hostd/wasm-cache",  // on-disk compilation cache
//		Store:    catalogStore,                 // plugin KV
//		InUse:    engine.TypeInUse,             // guards reloads
//	})
//	// err lists plugins that failed to load (*LoadError each); rt is usable.
//	defer rt.Close()
//
// The broadcast engine and the mapping module call plugins through:
//
//	rt.Lookup(msgType) (Handlers{Plugin, Ack, Validate, ResourceKeys}, bool)
//	rt.ResourceKeys(ctx, *abi.Message) ([]abi.ResourceKey, error)
//	rt.Validate(ctx, *abi.Message, snapshot catalog.Reader) error   // read-only KV
//	rt.Ack(ctx, *abi.Message) (*AckResult, error)                    // staged KV
//	rt.Policy(ctx, name, *abi.PolicyInput) (abi.PolicyOutput, error) // read-only KV
//
// Operators use List, Reload, KVGet and KVScan (host/api, hostd plugin).
//
// Call errors are *PluginError{Plugin, Handler, Name, Kind, Message};
// IsPermanent(err) says whether retrying can help (a handler's
// sdk.Permanent error, or output that is too large or does not decode).
// Traps, panics, OOM and timeouts are retryable: the instance was replaced.
// ErrNoHandler means no plugin registered that handler.
//
// # Plugin KV and exactly-once callbacks
//
// Each plugin's KV lives under catalog key prefix "pkv/<plugin>/". An ack
// callback's writes are staged (its reads see them) and returned in
// AckResult.Ops together with Checks (the version of every key it read; 0 =
// absent) and RangeChecks (every scanned range with the records seen). The
// caller commits all three in one catalog.Batch with its own state change
// (the task's TOMBSTONE), so a callback's KV effects happen exactly once;
// catalog.ErrConflict means something it read changed: run it again.
// Quotas (keys, bytes) are enforced by the commit: each namespace has a
// usage record ("pkv/<plugin>", exact key count and bytes) that a session
// reads before its first write; a write that would exceed a limit is
// refused at once (status quota), and a session whose writes change the
// usage carries the record's new value in Ops, checked at the version it
// read, so concurrent callbacks cannot together overshoot: the losers
// conflict and re-run against the new usage (kv.go). Sessions that write
// nothing, or only rewrite values at the same size, never touch it.
// Operators' writes (KVWrite) keep the record exact too.
//
// # Lease locks and fences
//
// Config.Locks (the lease service, adapted by host) serves lock_acquire,
// lock_renew, lock_release, fence_check and kv_put_fenced (locks.go).
// Acquires never wait. Only ack callbacks may change leases or write
// fenced; other handlers may only check fences (status read_only). A
// fenced put checks the fence at once and appends the catalog.Check from
// Locks.FenceCheck to AckResult.Checks, so committing the result re-checks
// the fence in the same transaction as the write. Errors wrapping
// ErrLocked, ErrNotHolder, ErrExpired, ErrInvalidKey and ErrInvalidLockArg
// reach the guest as stable statuses. PolicyPlugin(name) names the plugin
// serving a mapping policy (for the mapping's errors about its output).
//
// # Implementation notes
//
// Each plugin version has its own wazero.Runtime (so memory limits are per
// plugin) with the hostd host module and WASI preview 1 instantiated once,
// the compiled module (through the shared on-disk compilation cache), and
// a pool (a buffered channel) of warm instances, each with cached
// api.Function handles, a reusable input buffer in guest memory and a
// reusable callState. One call per instance at a time: the pool hands an
// instance to exactly one caller. Host functions find the callState through
// the call's context.
//
// Timeouts (instrument.go, watchdog.go): a module is first validated as
// it is by wazero (compiled through the cache and discarded), so the
// rewriter only ever reads valid modules, whose code cannot name the
// global and locals the rewrite adds (the rewriter checks every local and
// global index as well). It is then rewritten to check an exported
// interrupt counter (InterruptExport) at every function entry, at loop
// headers and before bulk memory/table instructions, charging weights
// (code size, bulk lengths) so that the work between two checks is
// bounded by code size; every check that runs out exits to Go, so a
// spinning guest cannot stall a GC stop-the-world for longer than its
// call timeout. A start section becomes the export StartExport, called
// under the watchdog before _initialize. When a call's context ends, the
// instance's watchdog writes the stop value and the guest traps at its
// next check; the error is classified from the context (timeout,
// canceled). Guest loops thus run at full speed. A module the rewriter
// does not understand is refused (ErrInvalidModule) unless its
// Limits.Interrupt is InterruptCloseOnContext: then it runs unmodified on
// a runtime with WithCloseOnContextDone(true), which exits to Go at every
// loop iteration; Info.Interrupt says which mode a plugin runs in.
// Closing a version stops its calls in flight through the same watchdogs,
// which also cancel the call's context so that a guest blocked in a host
// call returns (in close-on-context-done mode, the version's context
// cancels it). Starting an instance (instantiation, StartExport,
// _initialize) is bounded by Limits.InitTimeout; a start that runs out
// fails with an error wrapping ErrInitTimeout. Open creates a Runtime
// without loading (the first Reload loads), for callers that load in the
// background.
//
// An instance whose call failed in any way other than a handler's returned
// error (trap, panic, proc_exit, timeout, cancellation) is closed and its
// slot refilled by a background goroutine, with exponential backoff while
// instantiation fails (a runtime/sched.Backoff per plugin version,
// Config.BackoffInitial ×2 up to BackoffMax, timed on Config.Clock);
// calls fail with KindUnavailable while no instance is alive and starting
// one keeps failing.
//
// Guests get no filesystem, environment, arguments or network, and sleep
// is a no-op; they do get the real wall clock, monotonic clock and
// crypto/rand (wazero's defaults are fake). stdout and stderr are logged
// line by line with the plugin's name, within MaxLogBytes per call.
//
// Tables (tables.go) are bounded by a budget of MemoryLimit/4 at 8 bytes
// an element: every table's declared maximum is rewritten so that the
// maxima add up to at most the budget (table.grow beyond fails), and a
// module whose tables' minima exceed it, or that imports a table, is
// refused; this applies in both interrupt modes.
//
// Before instantiating, a compiled module's imports are checked against
// the host functions and WASI functions offered (name and signature) and
// its exports against ABI v1; the load error names the file and every
// problem.
//
// Reload compiles, validates and starts every new or changed file first,
// then swaps the route table under the lock. A replaced version is retired
// and closed when its last in-flight call returns (refcount). Locking:
// reloadMu serializes New/Reload/Close; mu guards versions, routes and
// loadErrs; no lock is held while calling a guest.
package wasm

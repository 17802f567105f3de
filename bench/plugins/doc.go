// Package pluginbench measures the per-call cost of an ack callback in a
// hostd Wasm plugin (runtime/wasm + sdk), as a ratio to a native Go
// function doing the same work, and next to the same call through the
// Extism Go SDK — all in one run:
//
//	cd bench && HOSTD_BENCH=1 go test -run TestPluginCallTable -v ./plugins
//
// The work (Parse) is identical everywhere: count the "key=value;"
// records of a 256-byte or 64-KiB payload and hash their values (the 0-byte
// rows show the fixed cost of a call); the 12-byte result is returned (hostd: a staged KV write, the way ack
// callbacks return state; Extism: output_set). The Extism side lives in
// the module bench/extism (its go-sdk pins an older wazero); the table test
// runs its TestExtismTable in a subprocess and merges its rows, each of
// which carries the native baseline measured in that process.
//
// The wazero-raw rows are the floor: the same work exported directly from a
// guest without hostd's ABI or SDK (testdata/rawparse), called through bare
// wazero with and without WithCloseOnContextDone (which hostd must use, so
// that an endless loop can be stopped).
//
// Each row is the best of three measurements of CPU time per call
// (getrusage, all threads of the process: on a shared machine wall time
// also counts waiting for a CPU); wall time is printed beside it.
// The hostd-no-kv rows skip the result's KV write, isolating its cost; the
// hostd-empty-handler rows call a handler that does nothing (a guest
// written against the ABI without the SDK, testdata/abidirect), the fixed
// cost of a call through hostd's runtime; hostd-lazy-decode parses the
// payload found in the envelope without the SDK's full decode.
// `go test -bench . ./plugins` runs the hostd rows as ordinary benchmarks.
package pluginbench

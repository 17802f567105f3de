// Package broadcast benchmarks the broadcast engine end to end: FastAck
// broadcasts to 4 vchannels with a trivial Wasm callback, durable (every
// commit fsynced before the reply), with 1, 16 and 256 concurrent clients,
// in-process (Engine.Submit) and over HTTP — next to baselines measured in
// the same run: the raw fsync rate of the data directory's filesystem, raw
// Badger single-key sync writes, and a minimal net/http JSON handler.
//
//	cd bench && go test ./broadcast -run TestReport -v                  # quick (1 s per row)
//	cd bench && HOSTD_BENCH_SECONDS=5 go test ./broadcast -run TestReport -v
//
// Targets (issue 4): in-process at 256 clients ≥ 5 broadcasts per raw
// fsync; over HTTP at 64 clients ≥ 0.3× the minimal handler; at 1 client
// p50 ≤ 3 raw fsync latencies.
package broadcast

// Package locks benchmarks hostd's lease locks over the HTTP API against
// the baselines a user would compare them with, all measured in the same
// run on the same machine:
//
//   - hostd: POST /v1/locks + POST /v1/locks/{id}/release on a real
//     daemon (in-process, default config, Badger with fsynced commits);
//   - minimal: a bare net/http JSON handler, two requests per pair (the
//     ceiling of any HTTP API here);
//   - redis: Debian's redis-server started on a free loopback port,
//     go-redis, SET key token NX PX ttl + a Lua compare-and-delete, once
//     without persistence and once with appendonly + appendfsync always;
//   - fsync: the raw write+fdatasync rate of the data directory's disk.
//
// Each runs with 1 and 64 concurrent clients on distinct keys. Run:
//
//	cd bench && HOSTD_BENCH_ROUNDS=4 HOSTD_BENCH_SLICE=2s go test ./locks -run XXX -bench LockPairs -benchtime 1x -v
//
// BenchmarkLockPairs prints a table of pairs/s with ratios at the end and,
// per row, the process CPU time per pair (user+system of this process,
// which holds hostd and the minimal server together with their clients;
// Redis's server CPU is not in it). On a busy machine both in-process
// systems are CPU-bound and their ratio approaches the inverse ratio of
// their CPU per pair. With -v it also logs, per hostd slice, the catalog
// commit rounds and writers per round (each pair is two fsynced rounds:
// the grant, then the release's delete). HOSTD_BENCH_ONLY=hostd/c=64,...
// runs only the named rows (for -cpuprofile); HOSTD_BENCH_TRACES=none
// shows what the default file trace exporter costs.
// Redis runs are skipped with a message if redis-server is not installed.
package locks

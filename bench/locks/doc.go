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
//	cd bench && go test ./locks -run XXX -bench . -benchtime 3s
//
// BenchmarkLockPairs prints a table of pairs/s with ratios at the end.
// Redis runs are skipped with a message if redis-server is not installed.
package locks

// Package e2e holds end-to-end tests that run the real hostd binary (built
// once by TestMain, with -tags failpoints) as a subprocess, with real
// plugins built by the tests, and kill it with SIGKILL where a test needs a
// crash.
//
//	go test ./e2e/
//	HOSTD_LONG=1 go test ./e2e/    # the long versions
//	HOSTD_CLUSTER_LONG=1 go test -run TestCluster ./e2e/   # only the cluster ones
//
// The tests:
//
//   - crash_test.go: broadcasts from a client ledger while hostd is killed
//     at every named crash point of the broadcast engine
//     (HOSTD_FAILPOINTS), then restarted; every acknowledged broadcast
//     completes exactly once.
//   - trace_test.go: the tracing model of tracing.md through the binary —
//     a broadcast whose plugin callback fails twice, hostd killed during an
//     attempt and restarted, read back with `hostd trace show --json` from
//     the stopped daemon's data directory: one trace, the expected tree.
//     HOSTD_E2E_CAPTURE=<file> also writes the rendered `hostd trace show`
//     of that run to <file> (docs/tracing.md quotes one).
//   - soak_test.go: the chaos soak of docs/reliability.md (SOAK_DURATION,
//     default 40s; SOAK_REPORT=<file> writes its report).
//   - diskfull_test.go: no room for the catalog's files at start; the
//     filesystem filling up while hostd runs (a small tmpfs mounted in a
//     user+mount namespace with `unshare -rm`).
//   - cluster_test.go: cluster mode through real processes — a 3-member
//     etcd in the test process (internal/etcdtest) and three hostd
//     replicas as subprocesses (cluster_helpers_test.go: start, find the
//     leader, kill -9, restart, SIGSTOP/SIGCONT, a client that spreads
//     requests over random replicas). TestClusterLeaderKills kills the
//     leader under broadcast and lease load (3 kills; 20 with
//     HOSTD_CLUSTER_LONG=1 or HOSTD_LONG=1) and logs the failover time
//     p50/p99; TestClusterPausedLeader pauses the leader past its election
//     TTL and checks that none of its old-term commits is accepted and that
//     a lease outlives the takeover with its full TTL.
//
// helpers_test.go holds what the tests share: the daemon subprocess
// (start, startReady, stop, kill), its config and log, the broadcast
// clients' idempotency-key ledger and submitters, and paged reads of
// broadcasts, plugin KV and vchannels.
package e2e

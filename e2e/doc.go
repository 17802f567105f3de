// Package e2e holds end-to-end tests that run the real hostd binary (built
// once by TestMain, with -tags failpoints) as a subprocess, with real
// plugins built by the tests, and kill it with SIGKILL where a test needs a
// crash.
//
//	go test ./e2e/
//	HOSTD_LONG=1 go test ./e2e/    # the long versions
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
//
// helpers_test.go holds what the tests share: the daemon subprocess
// (start, startReady, stop, kill), its config and log, the broadcast
// clients' idempotency-key ledger and submitters, and paged reads of
// broadcasts, plugin KV and vchannels.
package e2e

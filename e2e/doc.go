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
package e2e

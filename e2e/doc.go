// Package e2e holds end-to-end tests that run the real hostd binary as a
// subprocess, with real plugins built by the tests, and kill it with
// SIGKILL where a test needs a crash.
//
//	go test ./e2e/              # builds bin + plugins into temp dirs
//	HOSTD_E2E_CAPTURE=path go test -run TestTraceAcrossRestart ./e2e/
//
// trace_test.go checks the tracing model of tracing.md through the binary:
// a broadcast whose callback fails twice, with hostd killed during an
// attempt and restarted, read back with `hostd trace show --json` from the
// data directory of the stopped daemon. HOSTD_E2E_CAPTURE writes the
// rendered `hostd trace show` of that run to a file (docs/tracing.md quotes
// one).
package e2e

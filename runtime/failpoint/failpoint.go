// Package failpoint provides named crash points for crash tests.
//
// Code calls Hit("broadcast.after-persist") at each step of a state machine
// where a crash matters. In normal builds Hit is a no-op. In builds with the
// "failpoints" build tag, the environment variable HOSTD_FAILPOINTS selects
// points and actions:
//
//	HOSTD_FAILPOINTS="broadcast.after-persist=crash;wal.mid-append=crash@3"
//
// "crash" kills the process at once with SIGKILL semantics (os.Exit is not
// used, so no deferred code runs); "crash@N" does so on the N-th hit;
// "sleep:2s" makes every hit wait that long (to widen a race a test must
// exercise, e.g. cluster.session-lost: an old leader that keeps serving
// after its etcd session ended, so its commits meet the term fence). Every
// hit of an enabled or disabled point is appended to the file named by
// HOSTD_FAILPOINTS_LOG (one name per line) so a test can assert that each
// point was reached.
//
// Tests inside a process may also use Enable/Disable with a callback.
package failpoint

// Package waltest is the conformance suite of physical-queue backends
// (wal.Log): the embedded WAL on the catalog and JetStream (jswal) must
// both pass it, so the broadcast engine and the mapping can rely on the
// same behaviour whichever backend holds their queues.
//
//	func TestConformance(t *testing.T) {
//		waltest.Run(t, func(t *testing.T) wal.Log { return openMyLog(t) })
//	}
//
// open is called once per subtest and must return an empty log (no
// queues) that the test's cleanup closes. Each subtest creates its own
// queues, named with slashes ("t/0"), as the mapping names them.
//
// What it checks: offsets dense from 0 across batches; reads from an
// offset with a limit; min/max; reads across retention (Trim moves Min,
// never renumbers; a read below Min is a *wal.RangeError); concurrent
// appenders (every offset once, each caller's batch contiguous and in
// order); record sizes (a 64 KiB record round-trips, an 8 MiB one is
// wal.ErrTooLarge); record IDs (stored and read back; FindIDs from a
// low-water offset; AppendOnce appends only what is missing); Wait; Queues
// and Delete; Seal (for logs that are a wal.Sealer); errors for missing
// queues and bad arguments.
//
// Backend-specific behaviour (JetStream's term fences and duplicate
// window) is tested in the backend's own package.
package waltest

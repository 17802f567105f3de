// Package catalogtest is the catalog's conformance suite: one set of tests
// of the catalog.Store contract that every backend must pass. The Badger
// catalog runs it from runtime/catalog's tests; the etcd catalog runs it
// from runtime/catalog/etcdcat's tests against a real embedded etcd.
//
//	func TestConformance(t *testing.T) {
//		catalogtest.Run(t, func(t *testing.T) catalog.Store {
//			s := openMyBackend(t) // fresh and empty; closed by t.Cleanup
//			return s
//		})
//	}
//
// open must return a fresh, empty store with the backend's default limits
// and register its Close with t.Cleanup. Cases that pause the committer
// (shared rounds, close with queued commits, ...) need the store to
// implement catalog.Probe; cases about sizes need catalog.Limiter. A store
// without them skips those cases (say so in the backend's tests).
//
// What stays backend-specific: on-disk format and locking, repair, value-log
// GC, the SIGKILL sequence child (Badger); fencing, max-txn-ops splits,
// compaction, reopen across fenced stores (etcd); backup files.
package catalogtest

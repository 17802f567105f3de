// Package etcdcat is the catalog on etcd: an implementation of
// runtime/catalog's Store contract (snapshots, conditional batches through
// a batching committer, durable sequences) for cluster mode, where several
// hostd replicas share one catalog and one leader writes it. The design,
// with the reasons, is docs/etcd-catalog.md; this comment is the summary
// next to the code.
//
// # Using it
//
//	cli, _ := clientv3.New(clientv3.Config{Endpoints: endpoints})
//	base, err := etcdcat.Open(ctx, etcdcat.Options{Client: cli, Prefix: "/hostd/"})
//	// on winning an election whose key was created at revision term:
//	st := base.WithFence(etcdcat.Fence{Key: electionKey, Revision: term, OnFenced: stepDown})
//	// ... hand st to the term's single-writer components; on step-down:
//	st.Close()
//
// The caller owns the client: no Close closes it. A Store is a
// catalog.Store, catalog.Limiter and catalog.Probe; the conformance suite
// (runtime/catalog/catalogtest) runs against it on a real embedded etcd.
//
// # Keys
//
// Under Options.Prefix P (default "/hostd/"):
//
//	P k/<catalog key>   every record, including sys/format and sys/seq/<name>
//	P g/<dir>           delete generations of range checks (empty values)
//	P probe/...         never written: Open's limit probes target it
//
// # Versions and snapshots
//
// A record's Version is its etcd ModRevision. A View is a set of reads at
// one revision: the first read of the View fixes it (from the response
// header), later Gets and every Scan pass WithRev. A Scan is one
// RangeStream (etcd 3.7+; a Scan that opens the View fixes the revision
// with a one-key read first), because paged Range requests make the
// server count the rest of the range on every page (O(n²/page)); against
// older servers it pages with Range (256 records per request). When etcd compacts that revision while the View
// still reads, the read fails with *CompactedError (ErrCompacted) at once;
// run the View again.
//
// # Committer
//
// Every Commit of one Store goes through one goroutine, in rounds (what
// queued while the previous round ran). A round:
//
//  1. takes the longest prefix of the queue whose txn entries (compares +
//     ops + generation puts) and request bytes fit one txn;
//  2. reads, at one revision R, every key those writers check and the
//     first len(Seen)+1+deletes keys of every range they check (keys only,
//     in read-only txns of at most MaxTxnOps gets; the fence key too);
//  3. validates each writer on its own against that read overlaid with
//     the writes of the writers accepted before it in this txn (exactly
//     the Badger committer's rule): a failing writer alone gets
//     ErrConflict; the txn ends before the first passing writer that
//     touches a key the txn already writes (etcd evaluates all compares
//     before any op, and refuses a key written twice);
//  4. commits the txn: If(every check's compare, two compares per range
//     check, the fence) Then(the ops, one put per bumped generation)
//     Else(get the fence key). Success answers its writers with the txn's
//     revision; the rest of the round goes back to step 1 (read again:
//     the committed writers are now plain state).
//
// A txn whose compares fail although validation passed lost a race with a
// writer outside this Store: its writers are validated and tried again
// (each at most 8 times, then ErrConflict). If the Else branch shows the
// fence key gone or re-created, every writer of the round gets ErrFenced.
// A request error (timeout: unknown outcome) fails the txn's writers and
// the rest of the round with that error. A single batch whose entries or
// bytes exceed one txn is refused with ErrTooLarge naming the limits
// before it is queued.
//
// Checks: Version v > 0 is Compare(ModRevision(k) == v); Version 0 is
// Compare(CreateRevision(k) == 0). A RangeCheck validated at R becomes two
// compares, whatever its size: ModRevision < R+1 over the whole range
// (no insert or update since R), and ModRevision(P g/<dir>) < R+1, where
// dir is the range's common directory (the longest common prefix of its
// bounds, cut after a "/", at most four levels deep). Every delete of a
// key bumps the generations of "" and of each of its first four
// directories, so any delete inside the range since R moves dir's
// generation. R is the committer's own read just before the txn, so the
// only deletes that move a generation needlessly (elsewhere under the
// directory; anywhere, for an unbounded range, which uses the root
// generation) are another store's in that window: a lost race, retried,
// never a conflict of its own. Hence every writer of the prefix
// must be a Store of this package: a key deleted with a bare etcd client
// moves no generation and goes unseen by range checks.
//
// # Fence
//
// WithFence(f) returns a Store with its own committer and sequence blocks
// whose every txn also compares CreateRevision(f.Key) == f.Revision. A
// failed fence is told from a conflict by the fence key's read (in the
// read phase and in the Else branch); it returns an error wrapping
// catalog.ErrFenced, calls f.OnFenced once, and the store fails every
// later Commit and NextSequence at once.
//
// # Sequences
//
// sys/seq/<name> holds the reservation limit (catalog.EncodeSequence). A
// reservation reads it and writes limit+max(n, SequenceBlock) in a txn
// comparing its ModRevision (and the fence). Each Store keeps its own
// block; if another store moved the limit, the rest of this store's block
// is dropped, so values are unique across stores, terms and restarts.
//
// # Backup
//
// Backup writes every record under P k/ at one revision in the catalog's
// backup file format; Restore writes such a file (from either backend)
// under an empty prefix in txns that fit the limits, removing what it
// wrote on any error (the checksum is at the end of the file). Migrate
// streams any catalog.Backuper (an embedded *catalog.DB) into an empty
// prefix through a pipe: hostd migrate.
//
// # Metrics and spans
//
// runtime/catalog's commit instruments (hostd.catalog.commit.rounds,
// .txns — etcd write txns —, .writers, .duration, .conflicts, .failures)
// with backend="etcd"; "catalog.Commit" and "catalog.Backup" spans with
// catalog.backend="etcd".
//
// # Locking
//
// committer.mu guards the queue and the stopped flag only; seqState.mu is
// held across a reservation's etcd requests (the committer never takes
// it); Store.seqMu guards the map of sequences; a reader's mu guards its
// revision. No two are held together.
package etcdcat

// Package catalog is hostd's one door to durable state: an embedded Badger
// v4 database behind the small, etcd-shaped Store contract of catalog.go
// (snapshots, conditional batches, persisted sequences).
//
// # Using it
//
//	db, err := catalog.Open(catalog.DefaultOptions(dir)) // or OpenMemory() in tests
//	defer db.Close()
//	err = catalog.Update(ctx, db, func(r *catalog.Tracked) ([]catalog.Op, error) {
//		v, _, err := r.Get(key) // recorded as a Check
//		...
//		return []catalog.Op{{Key: key, Value: newValue}}, nil
//	})
//
// Update re-runs fn on a fresh snapshot when a concurrent writer changed
// what fn read (ErrConflict), a bounded number of times. Plugin KV staging
// and the lock service use NewTracked directly to collect Checks and
// RangeChecks without committing.
//
// Records are JSON by convention; decode them with DecodeJSON / Decode,
// which return a *DecodeError naming the key (never a panic).
//
// # Key namespaces
//
//	prefix  owner                 records
//	sys/    runtime/catalog       sys/format (format version, JSON),
//	                              sys/seq/<name> (sequence reservations)
//	bc/     builtin/broadcast     broadcast tasks, idempotency index
//	wal/    runtime/wal           physical queues
//	lk/     builtin/locks         lease locks, fences, audit records
//	mp/     builtin/mapping       static topics, consumer offsets, producer ids
//	pkv/    plugin KV             pkv/<plugin>/<key>
//
// Only the catalog writes sys/ (Commit rejects it with ErrInvalid). Badger's
// own "!badger!" prefix is rejected too.
//
// # Versions
//
// Badger runs in managed mode: the committer assigns commit timestamps
// itself, one per Badger transaction, and a record's Version is the
// timestamp of the transaction that wrote it. Writers of one round share a
// version unless the round had to be split. The newest version is the read
// timestamp of every new snapshot.
//
// # Committer
//
// Every write (Commit, NextSequence reservations, the format record) goes
// through one goroutine. A round is whatever queued while the previous round
// ran — there are no timers, so a lone writer is committed at once. For each
// round the committer:
//
//  1. opens one read snapshot at the newest version;
//  2. validates each writer in queue order: its Checks and RangeChecks
//     against the snapshot overlaid with the writes of the writers accepted
//     before it in the same round (a key written earlier in the round has a
//     version no reader can have seen, so any check on it conflicts; a
//     deleted key counts as absent). A writer that fails gets its own
//     ErrConflict and is left out; the others go on;
//  3. packs accepted writers, whole, into Badger transactions: normally one
//     per round; when the next writer would push the transaction past ~90%
//     of Badger's batch limits, the transaction is closed and a new one
//     starts (a round is split between writers, never inside one);
//  4. commits each transaction (fsynced when SyncWrites) and answers its
//     writers. If one fails, its writers and all later ones of the round get
//     the error (later writers were validated assuming earlier ones commit).
//
// A single batch larger than one transaction is rejected with ErrTooLarge
// naming its op count and size and the limits; values over MaxValueSize
// (1 MiB default) and keys over MaxKeySize are rejected the same way.
// Close fails queued commits with ErrClosed after the running round ends.
//
// # Sequences
//
// NextSequence reserves max(n, SequenceBlock) values by committing the new
// limit under sys/seq/<name> before handing any of them out; after a crash
// the sequence continues at the durable limit, so a value is never reused
// (gaps are allowed). TestSequenceNeverReusedAcrossSIGKILL checks this with
// a child process killed by SIGKILL.
//
// # Format, locking, GC, backup
//
// sys/format holds {"format_version": N}; Open refuses N > FormatVersion
// with a *FormatError naming the directory and both versions. A second
// open of a directory fails with a *LockedError (ErrLocked) naming it.
// Value-log GC runs every GCInterval (after letting Badger discard versions
// older than every open snapshot) and stops on Close.
//
// (*DB).Backup(ctx, w) (online, a consistent snapshot, the daemon keeps
// serving) and Restore(dir, r) (offline, into a new or empty directory)
// are what `hostd backup FILE` and `hostd restore FILE` call. The file is
// Badger's stream backup framed by a header (magic, codec, format version)
// and a SHA-256 trailer, so a truncated or corrupted file is refused
// (ErrBackup) instead of restoring part of a catalog.
//
// # Metrics and spans
//
// Through the OTel API (Options.MeterProvider, Options.TracerProvider):
// hostd.catalog.commit.rounds, .txns, .writers (histogram per round),
// .duration (seconds per round), .conflicts, .failures;
// hostd.catalog.gc.rewrites; a "catalog.Commit" span per Commit (ops,
// checks, version, writers in its round; error status on failure) and a
// "catalog.Backup" span. Stats returns the committer's counters for tests.
//
// # Locking
//
// Lock order: DB.closeMu → committer.mu → DB.readersMu; no two are held
// together except in that order. seqState.mu is held across the commit of
// its reservation (the committer never takes it); DB.seqMu only guards the
// map of sequences. The committer goroutine takes committer.mu only to swap
// out the queue and DB.readersMu only to compute the discard timestamp.
// A View holds no lock while fn runs; Close waits for open Views.
//
// # etcd
//
// Nothing here leaks Badger types. runtime/catalog/etcdcat implements the
// same contract on etcd (Version = ModRevision, rounds = txns split to fit
// etcd's limits, O(1) range checks through delete generations, a term
// fence); runtime/catalog/catalogtest is the conformance suite both
// backends pass. Probe, BackupWriter/ReadBackup and the exported
// sequence and format codecs exist for it.
package catalog

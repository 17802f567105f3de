// Package baseline holds the baselines every hostd benchmark reports its
// figures against, measured in the same run on the same machine, and the
// small measuring helpers they share:
//
//   - Run: drive an operation from C concurrent workers for a duration and
//     report rate, latency percentiles and process CPU time per op;
//   - Fsync: the raw rate and latency of write+fdatasync of a small record
//     to a file in a directory (the floor of any durable write there);
//   - BadgerSync: raw Badger single-key transactions with SyncWrites, from
//     C concurrent writers (Badger fsyncs once per transaction and does not
//     group concurrent commits);
//   - HTTPJSON: a minimal net/http JSON handler over loopback at C
//     concurrent clients (the ceiling of any HTTP API);
//   - Badger.Write: raw Badger writing N keys of B bytes in as few sync
//     transactions as it allows (the floor of a large durable change);
//   - CPUTime, Percentile, Best, LoadAvg: helpers.
//
// Its TestReport puts the machine's floors in the report (bench "machine":
// raw Badger vs raw fsync, 16 concurrent fsyncs vs 1, the minimal handler
// at 64 clients vs 1), so a reader sees what kind of machine the other
// ratios come from.
//
// A benchmark calls these in its own run and reports ratios (see package
// bench/report for the shared table).
package baseline

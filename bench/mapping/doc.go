// Package mapping benchmarks builtin/mapping (issue 6). TestReport emits
// the rows of the benchmark report (`make bench`), each figure beside a
// baseline measured in the same run:
//
//	cd bench && go test ./mapping -run TestReport -v -benchtime 200ms
//
// The rows:
//
//   - logic→physical translation ns/op on a logic queue with 1, 10 and
//     1,000 segments (cached mapping, binary search) vs a plain Go map
//     lookup, and 1,000 segments vs 1;
//   - a remap of a 10,000-queue topic over 100 brokers to 100 brokers of
//     which 50 are new (5,000 queues move), durable Badger: time vs raw
//     Badger writing the same keys and bytes in sync transactions, and
//     catalog bytes written vs those of creating the topic;
//   - reading 100 messages across a segment boundary vs within one segment.
//
// Issue 6 sets no numeric target for these, so the rows carry none.
// HOSTD_LONG=1 times 7 remaps instead of 3. The same measurements exist as
// Go benchmarks (`make bench-full` runs them; their lines have no baseline):
//
//	cd bench && go test ./mapping -run XXX -bench . -benchtime 2s
package mapping

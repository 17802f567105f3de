// Package mapping benchmarks builtin/mapping (issue 6):
//
//	go test -run XXX -bench . -benchtime 2s ./mapping/
//
// The benchmarks:
//
//   - BenchmarkTranslate: logic→physical translation on a logic queue
//     with 1, 10 and 1,000 segments (cached mapping, binary search), next
//     to a plain Go map lookup as the baseline.
//   - BenchmarkRemap10k: remap of a 10,000-queue topic over 100 brokers to
//     100 brokers of which 50 are new (5,000 queues move), durable Badger;
//     reports ms per remap and catalog bytes written per remap.
//   - BenchmarkRead: reading 100 messages within one segment vs across a
//     segment boundary (the ratio is in the report).
package mapping

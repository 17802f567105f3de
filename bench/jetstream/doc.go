// Package jetstream measures how hostd maps physical queues onto NATS
// JetStream (issue 14; docs/jetstream-wal.md has the numbers and the
// choice). TestReport emits rows of the benchmark report (`make bench`),
// each beside raw JetStream publish measured in the same run on the same
// in-process nats-server (file storage, sync_interval always, R1):
//
//	cd bench && HOSTD_BENCH=1 go test ./jetstream -run TestReport -v
//	cd bench && HOSTD_BENCH=1 HOSTD_JSWAL_QUEUES=10,10000 go test ./jetstream -run TestReport -v -timeout 30m
//
// For each queue count N (default 10; HOSTD_JSWAL_QUEUES lists others —
// 10,000 takes minutes, so CI and `make bench` do not run it):
//
//   - stream-per-queue (what runtime/wal/jswal does): creating N queues
//     (ms per queue, with the server's heap and goroutines per stream), a
//     writer's first append to each queue (it reads the tail first), and
//     then appends through jswal (expected last sequence, envelope,
//     headers) spread over the N queues vs raw js.Publish to the same N
//     streams;
//   - stream-per-broker (the alternative cluster.md names): one stream,
//     one subject per queue, raw publishes with
//     Nats-Expected-Last-Subject-Sequence over the N subjects, vs the same
//     raw publish. It is measured at the JetStream level only: hostd does
//     not implement that mapping (it would also need an offset index).
//
// TestReportFailover (HOSTD_BENCH=1, a few seconds) stops the JetStream
// leader of an R3 queue's stream and measures the pause until an append
// (wal.AppendOnce) succeeds again, from a client connected to a surviving
// server. The in-process server's Shutdown is graceful (it hands its
// leaderships over), so this is the pause of a clean stop; a crash waits
// for the raft election timeout instead and is not measured here.
//
// Workers: min(N, 16), each owning its own queues, so appends to one queue
// never contend. HOSTD_BENCH_SECONDS sets each timed run (default 2 s).
package jetstream

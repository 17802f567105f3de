// Package clusterbench measures cluster mode (host/cluster on a 3-member
// etcd, issue 13) beside raw etcd measured in the same run, on the same
// in-process etcd cluster (internal/etcdtest, heartbeat 100 ms):
//
//	cd bench && HOSTD_BENCH=1 go test ./cluster -run TestReport -v
//	cd bench && HOSTD_BENCH=1 HOSTD_BENCH_SECONDS=5 go test ./cluster -run TestReport -v
//
// Three replicas run in this process (host/cluster.Node, the code `hostd
// serve` runs for catalog.backend etcd). The figures:
//
//   - broadcasts/s submitted through the leader's API (a noop to two
//     vchannels, 64-byte payload, waiting for done) from 1, 16 and 64 clients,
//     beside raw etcd txns/s at the same concurrency, each txn carrying a
//     term-fence compare (like every leader commit) and putting as many
//     keys of the same size as one broadcast writes on average (counted
//     with a watch on the catalog prefix during the hostd run). The note
//     says how many etcd txns (revisions) one broadcast costs.
//   - lease acquire+release pairs/s through the leader from 1, 16 and 64
//     clients, beside raw etcd txn pairs (compare-and-put, delete, each
//     with the fence compare) at the same concurrency;
//   - the handover when the leader stops cleanly (Shutdown: it resigns):
//     from the stop to the first broadcast acknowledged through a
//     survivor, beside cluster.election_ttl. A crashed leader is measured
//     by the e2e test (e2e/cluster_test.go, TestClusterLeaderKills logs
//     p50/p99): a crash waits for the election TTL.
//
// TestReportJetStream (issue 14) runs the replicas with their physical
// queues on a 3-server JetStream cluster (wal.backend jetstream, R3 file
// streams, sync_interval always) and reports broadcasts/s to 4 vchannels
// from 1, 16 and 64 clients beside raw JetStream publishes of the same 4
// messages (one per R3 stream, awaited together) at the same concurrency:
//
//	cd bench && HOSTD_BENCH=1 go test ./cluster -run TestReportJetStream -v
//
// HOSTD_BENCH_SECONDS sets each timed run (default 2 s).
package clusterbench

// Package cluster runs one replica of a cluster-mode hostd
// (catalog.backend: etcd; design: shared/design/cluster.md, user guide:
// docs/cluster.md).
//
// Every replica loads the same config and serves the whole API on
// api.listen through a front server. The replicas elect one leader through
// etcd (concurrency.Session with TTL cluster.election_ttl, then
// Election.Campaign; the election value names the leader and its
// advertise URL). Only the leader runs hostd's single-writer components:
// for each term it builds a fresh host.Host (Options.Embedded) on a
// catalog store fenced on that term — every commit compares the election
// key's create revision with the term — so a paused or partitioned old
// leader can never change state once a newer leader exists (its commits
// fail with catalog.ErrFenced, answered as 503).
//
// Routing, in the front server's Fallback:
//
//   - the leader serves requests with its term's Host;
//   - a follower forwards them once to the leader's advertise URL with the
//     caller's Authorization and traceparent and a Hostd-Forwarded hop
//     header; a forwarded request that reaches a replica that is not the
//     leader answers 503 (never forwarded twice);
//   - with no leader (an election, or the new leader's term still
//     recovering) a request waits up to api.request_timeout, then gets
//     503 unavailable with Retry-After.
//
// The front server itself serves /healthz, /readyz (ready when a leader is
// known and the replica's plugins are in place; on the leader, when its
// term has recovered), /metrics, /v1/version, /v1/openapi.json and
// GET /v1/cluster (members from their etcd session keys, leader, term,
// plugin hash drift).
//
// Some requests concern every replica rather than the leader (fanout.go):
// GET /v1/traces and GET /v1/traces/{id} (each replica's spans are in its
// own data.dir; traces.go merges them, each span once) and
// POST /v1/plugins/reload (every member re-hashes and precompiles its
// plugin files and rewrites its member record; the leader reloads its
// term's runtime; reload.go). The replica a request reaches asks every
// member in etcd — itself in process, the others once over HTTP with the
// caller's token, the trace context and the hop header — and answers with
// each member's outcome; a member that does not answer is reported
// (missing, unreachable), never fatal. A request with the hop header is
// answered for this replica alone.
//
// Step-down: when the session is lost, a commit is fenced, or the process
// is told to stop, the replica resigns (so a successor need not wait for
// the TTL), shuts the term's Host down (its in-flight work fails with
// 503) and, unless stopping, campaigns again with a new session. Nothing
// built in a term survives it: sequences, caches, lock tables and ticks are
// rebuilt by the next term's Host from the catalog.
package cluster

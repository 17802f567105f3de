package wire

import "time"

// Cluster is the answer of GET /v1/cluster: who leads a cluster-mode
// deployment (catalog.backend etcd) and the state of every replica.
type Cluster struct {
	// Self is the name of the replica that answered.
	Self string `json:"self"`
	// Leader is the current leader, absent during an election.
	Leader *ClusterLeader `json:"leader,omitempty"`
	// Members are the replicas alive in etcd (their session holds), by name.
	Members []ClusterMember `json:"members"`
	// Problems are configuration drifts between members, e.g. a plugin
	// whose hash differs; empty when none.
	Problems []string `json:"problems"`
}

// ClusterLeader names the leader and its term.
type ClusterLeader struct {
	Name    string `json:"name"`
	Address string `json:"address"`
	// Term is the leader's election key create revision in etcd: it
	// grows with every new term, and every commit of the leader is
	// fenced on it.
	Term int64 `json:"term"`
	// Since is when the answering replica first saw this term (zero
	// when it came from before this replica started).
	Since time.Time `json:"since,omitzero"`
}

// ClusterMember is one replica.
type ClusterMember struct {
	Name    string `json:"name"`
	Address string `json:"address"`
	Version string `json:"version"`
	// Ready: this replica knows a leader and its plugins are in place;
	// the leader also has finished its term's recovery.
	Ready  bool `json:"ready"`
	Leader bool `json:"leader"`
	// Plugins maps each plugin name to the SHA-256 of its .wasm file on
	// that replica.
	Plugins map[string]string `json:"plugins"`
	// Since is when the replica joined (started its etcd session).
	Since time.Time `json:"since"`
}

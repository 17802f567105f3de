package client

import (
	"context"
	"net/http"

	"github.com/hostd-dev/hostd/wire"
)

// Cluster-mode types (GET /v1/cluster).
type (
	Cluster       = wire.Cluster
	ClusterLeader = wire.ClusterLeader
	ClusterMember = wire.ClusterMember
)

// Cluster calls GET /v1/cluster: leader, term and members of a cluster-mode
// deployment. An embedded (single-process) hostd answers 404.
func (c *Client) Cluster(ctx context.Context) (*Cluster, error) {
	var out Cluster
	if err := c.Do(ctx, http.MethodGet, "/v1/cluster", nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

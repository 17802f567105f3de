package cluster

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/hostd-dev/hostd/host/config"
	"github.com/hostd-dev/hostd/runtime/catalog"
	"github.com/hostd-dev/hostd/runtime/catalog/etcdcat"
)

// MigrateResult tells what Migrate moved.
type MigrateResult struct {
	// Version is the embedded catalog's version that was copied.
	Version catalog.Version
	// Prefix and Endpoints name where it went.
	Prefix    string
	Endpoints []string
}

// Migrate copies the embedded catalog in dataDir (no hostd may run on it:
// it takes the directory's lock) into the etcd catalog cfg names
// (catalog.etcd.*), whose prefix must be empty — start the replicas only
// afterwards. The copy is a backup streamed into a restore: every record
// (tasks, idempotency entries, leases, topics, queues, plugin KV) moves
// as it is; a failure leaves the prefix empty again. The data dir is not
// changed.
func Migrate(ctx context.Context, cfg *config.Config, dataDir string, log *slog.Logger) (MigrateResult, error) {
	res := MigrateResult{Prefix: cfg.Catalog.Etcd.Prefix, Endpoints: cfg.Catalog.Etcd.Endpoints}
	if !cfg.ClusterMode() {
		return res, errors.New("migrate: the target config's catalog.backend is not etcd")
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	o := catalog.DefaultOptions(dataDir)
	o.Logger = log.With("component", "catalog")
	src, err := catalog.Open(o)
	if err != nil {
		return res, fmt.Errorf("migrate: open the embedded catalog %s: %w", dataDir, err)
	}
	defer src.Close()
	cli, err := dialEtcd(ctx, cfg)
	if err != nil {
		return res, err
	}
	defer cli.Close()
	e := cfg.Catalog.Etcd
	res.Version, err = etcdcat.Migrate(ctx, src, etcdcat.Options{
		Client: cli, Prefix: e.Prefix, MaxTxnOps: e.MaxTxnOps, MaxRequestBytes: int(e.MaxRequestBytes),
		RequestTimeout: e.RequestTimeout, Logger: log.With("component", "catalog"),
	})
	if err != nil {
		return res, fmt.Errorf("migrate %s into etcd %v under %s: %w", dataDir, e.Endpoints, e.Prefix, err)
	}
	return res, nil
}

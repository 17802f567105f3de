package main

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/hostd-dev/hostd/host/cluster"
	"github.com/hostd-dev/hostd/host/config"
)

func newMigrateCmd(g *globals) *cobra.Command {
	var file, from string
	cmd := &cobra.Command{
		Use:   "migrate --from DATA_DIR --config CLUSTER.yaml",
		Short: "Move an embedded data dir into an etcd catalog (to start cluster mode)",
		Long: `Copy the embedded catalog of a stopped hostd (--from, its data.dir) into the
etcd catalog named by a cluster-mode config (--config: catalog.backend etcd,
catalog.etcd.*). Everything moves as it is: broadcast tasks and their
idempotency entries, leases and fences, topics and queues, plugin KV. The
etcd prefix must be empty, so run it before the first replica starts; on
any failure it is left empty again. The data dir is not changed (keep it
as a backup). See docs/cluster.md.`,
		Example: `  hostd migrate --from ./hostd-data --config cluster.yaml`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if from == "" || file == "" {
				return &exitErr{code: exitUsage, err: fmt.Errorf("migrate needs --from DATA_DIR and --config CLUSTER.yaml")}
			}
			if _, err := os.Stat(from); err != nil {
				return err
			}
			cfg, err := config.Load(config.Source{File: file})
			if err != nil {
				return err
			}
			res, err := cluster.Migrate(cmd.Context(), cfg, from, nil)
			if err != nil {
				return err
			}
			out := map[string]any{"from": from, "version": uint64(res.Version), "endpoints": res.Endpoints, "prefix": res.Prefix}
			if g.output == "json" {
				return g.print(out, nil, nil)
			}
			_, err = fmt.Fprintf(g.stdout, "migrated %s (catalog version %d) into etcd %v under %s\n", from, res.Version, res.Endpoints, res.Prefix)
			return err
		},
	}
	cmd.Flags().StringVar(&from, "from", "", "data dir of the embedded hostd (stopped)")
	cmd.Flags().StringVarP(&file, "config", "c", "", "cluster-mode config naming the etcd catalog")
	return cmd
}

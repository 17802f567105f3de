package main

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"
)

func newClusterCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "cluster",
		Short: "Inspect a cluster-mode deployment (catalog.backend: etcd)",
	}
	cmd.AddCommand(&cobra.Command{
		Use:   "status",
		Short: "Show the leader, its term and every replica (version, readiness, plugin hashes)",
		Long: `Show the leader, its term and every replica: address, version, readiness and
the hashes of its plugins. Problems (a plugin that differs between replicas,
mixed versions) are listed below the table; with problems the command exits 1.
Any replica answers; an embedded hostd answers 404.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := g.client()
			if err != nil {
				return err
			}
			st, err := c.Cluster(cmd.Context())
			if err != nil {
				return err
			}
			rows := make([][]string, 0, len(st.Members))
			for _, m := range st.Members {
				role := "follower"
				if m.Leader {
					role = "leader"
				}
				ready := "no"
				if m.Ready {
					ready = "yes"
				}
				var ps []string
				for name, h := range m.Plugins {
					ps = append(ps, name+"="+h[:min(12, len(h))])
				}
				slices.Sort(ps)
				rows = append(rows, []string{m.Name, role, m.Address, m.Version, ready,
					m.Since.Local().Format(time.DateTime), strings.Join(ps, " ")})
			}
			if g.output == "table" {
				leader := "none (election in progress)"
				if st.Leader != nil {
					leader = fmt.Sprintf("%s (term %d, %s)", st.Leader.Name, st.Leader.Term, st.Leader.Address)
					if !st.Leader.Since.IsZero() {
						leader += " since " + st.Leader.Since.Local().Format(time.DateTime)
					}
				}
				fmt.Fprintf(g.stdout, "leader: %s\nanswered by: %s\n\n", leader, st.Self)
			}
			if err := g.print(st, []string{"NAME", "ROLE", "ADDRESS", "VERSION", "READY", "SINCE", "PLUGINS"}, rows); err != nil {
				return err
			}
			if len(st.Problems) > 0 {
				if g.output == "table" {
					fmt.Fprintln(g.stdout)
					for _, p := range st.Problems {
						fmt.Fprintln(g.stdout, "problem:", p)
					}
				}
				return fmt.Errorf("%d cluster problem(s)", len(st.Problems))
			}
			return nil
		},
	})
	return cmd
}

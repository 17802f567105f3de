package main

import (
	"fmt"
	"runtime"
	"runtime/debug"

	"github.com/spf13/cobra"

	"github.com/hostd-dev/hostd/host/api"
)

// Set with -ldflags "-X main.version=v1.2.3 -X main.commit=abc -X main.buildDate=2026-01-01".
var (
	version   = ""
	commit    = ""
	buildDate = ""
)

// versionInfo describes this binary.
func versionInfo() api.VersionInfo {
	v := api.VersionInfo{Version: version, Commit: commit, BuildDate: buildDate, GoVersion: runtime.Version()}
	if bi, ok := debug.ReadBuildInfo(); ok {
		if v.Version == "" && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
			v.Version = bi.Main.Version
		}
		for _, s := range bi.Settings {
			if s.Key == "vcs.revision" && v.Commit == "" {
				v.Commit = s.Value
			}
		}
	}
	if v.Version == "" {
		v.Version = "dev"
	}
	return v
}

func newVersionCmd(g *globals) *cobra.Command {
	var server bool
	cmd := &cobra.Command{
		Use:   "version",
		Short: "Print the version of this binary (and of the daemon with --server)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			local := versionInfo()
			out := map[string]any{"client": local}
			rows := [][]string{{"client", local.Version, local.Commit, local.GoVersion}}
			if server {
				c, err := g.client()
				if err != nil {
					return err
				}
				sv, err := c.Version(cmd.Context())
				if err != nil {
					return err
				}
				out["server"] = sv
				rows = append(rows, []string{"server", sv.Version, sv.Commit, sv.GoVersion})
			}
			if g.output == "table" && !server {
				_, err := fmt.Fprintln(g.stdout, "hostd", local.Version, local.Commit, local.GoVersion)
				return err
			}
			return g.print(out, []string{"WHO", "VERSION", "COMMIT", "GO"}, rows)
		},
	}
	cmd.Flags().BoolVar(&server, "server", false, "also ask the daemon at --addr")
	return cmd
}

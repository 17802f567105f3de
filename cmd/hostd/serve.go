package main

import (
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/hostd-dev/hostd/host"
	"github.com/hostd-dev/hostd/host/cluster"
	"github.com/hostd-dev/hostd/host/config"
)

// serveFlags maps serve's flags to config keys.
var serveFlags = []struct{ flag, key, usage string }{
	{"listen", "api.listen", "API listen address, host:port (api.listen, HOSTD_API__LISTEN; default 127.0.0.1:7070)"},
	{"data-dir", "data.dir", "data directory (data.dir, HOSTD_DATA__DIR; default ./hostd-data)"},
	{"log-level", "log.level", "debug, info, warn or error (log.level, HOSTD_LOG__LEVEL)"},
	{"log-format", "log.format", "text or json (log.format, HOSTD_LOG__FORMAT)"},
}

func newServeCmd(g *globals) *cobra.Command {
	var file string
	var inMemory bool
	vals := make([]string, len(serveFlags))
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Run the hostd daemon",
		Long: `Run the hostd daemon in the foreground until SIGINT or SIGTERM.

Configuration comes from the defaults, then the YAML file (--config), then
HOSTD_* environment variables (HOSTD_API__LISTEN=...), then these flags.
See docs/config.md. With no configuration at all hostd listens on
127.0.0.1:7070 and keeps its data in ./hostd-data.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			flags := map[string]any{}
			for i, f := range serveFlags {
				if cmd.Flags().Changed(f.flag) {
					flags[f.key] = vals[i]
				}
			}
			if cmd.Flags().Changed("in-memory") {
				flags["data.in_memory"] = inMemory
			}
			cfg, err := config.Load(config.Source{File: file, Flags: flags})
			if err != nil {
				return err
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGINT, syscall.SIGTERM)
			defer stop()
			go func() {
				// After the first signal starts the graceful shutdown, a
				// second one gets the default behavior: exit at once.
				<-ctx.Done()
				stop()
			}()
			if cfg.ClusterMode() {
				// A replica: elect a leader through etcd, serve the API
				// on every replica (docs/cluster.md).
				n, err := cluster.Open(ctx, cfg, cluster.Options{Version: versionInfo(), LogOutput: g.stderr})
				if err != nil {
					return err
				}
				return n.Run(ctx)
			}
			h, err := host.Open(ctx, cfg, host.Options{Version: versionInfo(), LogOutput: g.stderr})
			if err != nil {
				return err
			}
			return h.Run(ctx)
		},
	}
	cmd.Flags().StringVarP(&file, "config", "c", os.Getenv("HOSTD_CONFIG"), "YAML config file (optional; env HOSTD_CONFIG)")
	for i, f := range serveFlags {
		cmd.Flags().StringVar(&vals[i], f.flag, "", f.usage)
	}
	cmd.Flags().BoolVar(&inMemory, "in-memory", false, "keep all state in memory, lost on exit (data.in_memory)")
	return cmd
}

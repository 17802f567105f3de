package main

import (
	"encoding/base64"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/hostd-dev/hostd/client"
)

// newPluginCmd is the `hostd plugin` noun: operator subcommands (ls,
// reload, kv) talk to a running daemon; author subcommands (new, build)
// work offline (plugin_scaffold.go).
func newPluginCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "plugin",
		Short: "List, reload and inspect Wasm plugins; create and build them",
		Long: `Plugins are WebAssembly modules (ABI v1, docs/plugin-abi.md) loaded from
plugins.dir and plugins.list. They register ack callbacks, validators and
resource-key functions per message type, and mapping policies.`,
	}
	cmd.AddCommand(newPluginLsCmd(g), newPluginReloadCmd(g), newPluginKVCmd(g))
	addPluginAuthorCmds(cmd, g)
	return cmd
}

func newPluginLsCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "ls",
		Short: "List plugins: file hash, ABI, registrations, pool, calls and failures, load errors",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := g.client()
			if err != nil {
				return err
			}
			var all []client.Plugin
			page := client.Page{Limit: 1000}
			for {
				l, err := c.ListPlugins(cmd.Context(), page)
				if err != nil {
					return err
				}
				all = append(all, l.Items...)
				if l.NextPageToken == "" {
					break
				}
				page.Token = l.NextPageToken
			}
			return printPlugins(g, all, all)
		},
	}
}

func printPlugins(g *globals, v any, ps []client.Plugin) error {
	rows := make([][]string, 0, len(ps))
	for _, p := range ps {
		regs := make([]string, len(p.Registrations))
		for i, r := range p.Registrations {
			regs[i] = r.Kind + ":" + r.Name
			if r.Role == "admin" {
				regs[i] += "(admin)" // broadcasting the type needs an admin token
			}
		}
		sum := p.SHA256
		if len(sum) > 12 {
			sum = sum[:12]
		}
		status := "ok"
		switch {
		case p.Error != "" && p.SHA256 == "":
			status = "not loaded: " + p.Error
		case p.Error != "":
			status = "old version running: " + p.Error
		case p.StartFailures > 0:
			status = fmt.Sprintf("failing to start (%d)", p.StartFailures)
		}
		interrupt := p.Interrupt
		if interrupt == "" {
			interrupt = "-"
		}
		rows = append(rows, []string{p.Name, sum, abiStr(p.ABI), strings.Join(regs, ","),
			fmt.Sprintf("%d/%d", p.Live, p.PoolSize), strconv.FormatUint(p.Calls, 10), strconv.FormatUint(p.Failures, 10), interrupt, status})
	}
	// Calls and failures are counted in memory per loaded version: they
	// start at 0 when hostd starts and when a reload loads a new file.
	return g.print(v, []string{"NAME", "SHA256", "ABI", "REGISTRATIONS", "POOL", "CALLS SINCE LOAD", "FAILURES SINCE LOAD", "INTERRUPT", "STATUS"}, rows)
}

func abiStr(v int) string {
	if v == 0 {
		return "-"
	}
	return "v" + strconv.Itoa(v)
}

func newPluginReloadCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "reload",
		Short: "Reload plugins from the directory and config (like SIGHUP); in-flight calls finish on the old version",
		Long: `Reload compiles and validates every new or changed plugin file before
swapping it in; unchanged files keep running. A file that fails to load is
reported and its previous version keeps running. A reload that would remove a
message type still needed by pending broadcasts is refused (plugin_in_use).
In cluster mode the reload reaches every replica (each re-reads, re-hashes
and precompiles its files; the leader reloads the plugins it runs): a table
lists each replica's outcome (ok, error, unreachable). Exit code 1 if any
file failed to load or any replica was not ok.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := g.client()
			if err != nil {
				return err
			}
			res, err := c.ReloadPlugins(cmd.Context())
			if err != nil {
				return err
			}
			if err := printPlugins(g, res, res.Items); err != nil {
				return err
			}
			failed := len(res.Errors) > 0
			for _, e := range res.Errors {
				fmt.Fprintf(g.stderr, "hostd: plugin %s (%s): %s\n", e.Plugin, e.Path, e.Message)
			}
			if len(res.Members) > 0 && g.output == "table" {
				fmt.Fprintln(g.stdout)
				rows := make([][]string, 0, len(res.Members))
				for _, m := range res.Members {
					role := "follower"
					if m.Leader {
						role = "leader"
					}
					var ps []string
					for name, h := range m.Plugins {
						ps = append(ps, name+"="+h[:min(12, len(h))])
					}
					slices.Sort(ps)
					rows = append(rows, []string{m.Name, role, m.Outcome, strings.Join(ps, " "), m.Error})
				}
				if err := g.print(nil, []string{"REPLICA", "ROLE", "OUTCOME", "PLUGINS", "ERROR"}, rows); err != nil {
					return err
				}
			}
			for _, m := range res.Members {
				if m.Outcome != "ok" {
					failed = true
					for _, e := range m.Errors {
						fmt.Fprintf(g.stderr, "hostd: replica %s: plugin %s: %s\n", m.Name, e.Plugin, e.Message)
					}
				}
			}
			if failed {
				return withCode(exitError, nil)
			}
			return nil
		},
	}
}

func newPluginKVCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "kv",
		Short: "Read a plugin's KV (its state in the catalog)",
	}
	get := &cobra.Command{
		Use:   "get NAME KEY",
		Short: "Print one value of plugin NAME's KV",
		Args:  cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := g.client()
			if err != nil {
				return err
			}
			kv, err := c.GetPluginKV(cmd.Context(), args[0], args[1])
			if err != nil {
				return err
			}
			if g.output == "json" {
				return g.print(kv, nil, nil)
			}
			fmt.Fprintln(g.stdout, kvText(kv))
			return nil
		},
	}
	var prefix string
	var limit int
	scan := &cobra.Command{
		Use:     "scan NAME",
		Short:   "List plugin NAME's KV entries (optionally under --prefix)",
		Example: "  hostd plugin kv scan collections --prefix coll/",
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if limit < 1 {
				return withCode(exitUsage, fmt.Errorf("invalid argument %d for --limit: must be >= 1", limit))
			}
			c, err := g.client()
			if err != nil {
				return err
			}
			var all []client.PluginKV
			page := client.Page{Limit: min(limit, 1000)}
			for {
				l, err := c.ScanPluginKV(cmd.Context(), args[0], prefix, page)
				if err != nil {
					return err
				}
				all = append(all, l.Items...)
				if l.NextPageToken == "" || len(all) >= limit {
					break
				}
				page.Token = l.NextPageToken
			}
			if len(all) > limit {
				all = all[:limit]
			}
			rows := make([][]string, len(all))
			for i := range all {
				rows[i] = []string{all[i].Key, kvText(&all[i])}
			}
			return g.print(all, []string{"KEY", "VALUE"}, rows)
		},
	}
	scan.Flags().StringVar(&prefix, "prefix", "", "only keys starting with this prefix")
	scan.Flags().IntVar(&limit, "limit", 1000, "most entries to print")
	cmd.AddCommand(get, scan, newPluginKVPutCmd(g), newPluginKVDeleteCmd(g))
	return cmd
}

// kvFenceFlags are the optional --fence-key and --fence of a KV write.
type kvFenceFlags struct {
	key   string
	fence uint64
}

func (f *kvFenceFlags) add(cmd *cobra.Command) {
	cmd.Flags().StringVar(&f.key, "fence-key", "", "lease lock domain:key whose fence the write carries (with --fence)")
	cmd.Flags().Uint64Var(&f.fence, "fence", 0, "fence number of your grant on --fence-key: the write commits only while it is current")
}

// get returns the fence to send (nil without one); both flags or neither.
func (f *kvFenceFlags) get(cmd *cobra.Command) (*client.KVFence, error) {
	hasKey, hasFence := cmd.Flags().Changed("fence-key"), cmd.Flags().Changed("fence")
	if !hasKey && !hasFence {
		return nil, nil
	}
	if !hasKey || !hasFence || f.fence == 0 {
		return nil, withCode(exitUsage, fmt.Errorf("invalid argument: --fence-key and a positive --fence go together"))
	}
	k, err := parseKey(f.key)
	if err != nil || k.Mode != "shared" {
		return nil, withCode(exitUsage, fmt.Errorf("invalid argument %q for --fence-key: want domain:key", f.key))
	}
	return &client.KVFence{Domain: k.Domain, Key: k.Key, Fence: f.fence}, nil
}

const kvWriteLong = `A write with --fence-key and --fence (role write) commits only while the
fence is a current holder's fence on that lease lock, re-checked in the
committing transaction; a stale fence (released, expired, force-released)
fails with not_holder (exit 1) and nothing is written. A write without a
fence overrides the plugin's state and needs role admin.`

func newPluginKVPutCmd(g *globals) *cobra.Command {
	var (
		ff     kvFenceFlags
		base64 bool
	)
	cmd := &cobra.Command{
		Use:   "put NAME KEY VALUE",
		Short: "Write one value of plugin NAME's KV (optionally fenced by a lease)",
		Long:  kvWriteLong + "\n\nVALUE is text, base64 with --base64, or - to read it from stdin.",
		Example: `  hostd plugin kv put jobs owner/r0 worker-1 --fence-key jobs:r0 --fence 42
  hostd plugin kv put collections coll/x - < record.json`,
		Args: cobra.ExactArgs(3),
		RunE: func(cmd *cobra.Command, args []string) error {
			fence, err := ff.get(cmd)
			if err != nil {
				return err
			}
			value := []byte(args[2])
			switch {
			case args[2] == "-":
				if value, err = io.ReadAll(cmd.InOrStdin()); err != nil {
					return err
				}
			case base64:
				if value, err = b64dec(args[2]); err != nil {
					return withCode(exitUsage, fmt.Errorf("invalid argument: VALUE is not base64: %v", err))
				}
			}
			c, err := g.client()
			if err != nil {
				return err
			}
			kv, err := c.PutPluginKV(cmd.Context(), args[0], args[1], value, fence)
			if err != nil {
				return err
			}
			return g.print(kv, []string{"KEY", "VERSION"}, [][]string{{kv.Key, strconv.FormatUint(kv.Version, 10)}})
		},
	}
	ff.add(cmd)
	cmd.Flags().BoolVar(&base64, "base64", false, "VALUE is base64")
	return cmd
}

func newPluginKVDeleteCmd(g *globals) *cobra.Command {
	var ff kvFenceFlags
	cmd := &cobra.Command{
		Use:     "delete NAME KEY",
		Short:   "Delete one key of plugin NAME's KV (optionally fenced by a lease; absent is not an error)",
		Long:    kvWriteLong,
		Example: `  hostd plugin kv delete jobs owner/r0 --fence-key jobs:r0 --fence 42`,
		Args:    cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			fence, err := ff.get(cmd)
			if err != nil {
				return err
			}
			c, err := g.client()
			if err != nil {
				return err
			}
			if err := c.DeletePluginKV(cmd.Context(), args[0], args[1], fence); err != nil {
				return err
			}
			return g.print(map[string]any{"key": args[1], "deleted": true}, []string{"KEY", "DELETED"}, [][]string{{args[1], "true"}})
		},
	}
	ff.add(cmd)
	return cmd
}

// kvText shows a value as text when it is UTF-8, else as base64.
func kvText(kv *client.PluginKV) string {
	if kv.ValueText != nil {
		return *kv.ValueText
	}
	return fmt.Sprintf("base64:%s", b64(kv.Value))
}

func b64(b []byte) string { return base64.StdEncoding.EncodeToString(b) }

func b64dec(s string) ([]byte, error) { return base64.StdEncoding.DecodeString(s) }

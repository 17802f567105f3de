package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/hostd-dev/hostd/client"
	"github.com/hostd-dev/hostd/host/config"
)

// commands are hostd's subcommands, one line per noun. A feature adds
// cmd/hostd/<feature>.go with a constructor and one line here.
var commands = []func(g *globals) *cobra.Command{
	newServeCmd,
	newCheckConfigCmd,
	newVersionCmd,
	newBackupCmd,
	newRestoreCmd,
	newBroadcastCmd,
	newLockCmd,
	newPresenceCmd,
	newTopicCmd,
	newGroupCmd,
	newChannelCmd,
	newPluginCmd,
	newTraceCmd,
	newAPICmd,
	newClusterCmd,
	newMigrateCmd,
}

// Exit codes.
const (
	exitOK     = 0
	exitError  = 1 // the command failed
	exitUsage  = 2 // bad flags or arguments
	exitConfig = 3 // the configuration is invalid
	exitFailed = 4 // the operation ran and ended FAILED (broadcast send)
)

// globals are the flags every client command shares, and the output.
type globals struct {
	addr   string
	token  string
	output string
	stdout io.Writer
	stderr io.Writer
}

// exitError carries an exit code through cobra.
type exitErr struct {
	code int
	err  error
}

func (e *exitErr) Error() string { return e.err.Error() }
func (e *exitErr) Unwrap() error { return e.err }

func withCode(code int, err error) error { return &exitErr{code: code, err: err} }

func run(args []string, stdout, stderr io.Writer) int {
	root := newRootCmd(stdout, stderr)
	root.SetArgs(args)
	err := root.ExecuteContext(context.Background())
	if err == nil {
		return exitOK
	}
	var ve *config.ValidationError
	var ee *exitErr
	switch {
	case errors.As(err, &ee) && ee.err == nil:
		return ee.code
	case errors.As(err, &ve):
		fmt.Fprintln(stderr, "hostd:", err)
		return exitConfig
	case errors.As(err, &ee):
		fmt.Fprintln(stderr, "hostd:", err)
		return ee.code
	}
	fmt.Fprintln(stderr, "hostd:", err)
	if isUsageError(err) {
		fmt.Fprintln(stderr, "Run 'hostd --help' for usage.")
		return exitUsage
	}
	return exitError
}

// isUsageError recognizes cobra's flag and argument errors.
func isUsageError(err error) bool {
	var ae *client.Error
	if errors.As(err, &ae) {
		return false // the API answered: its message may say "invalid argument", but the command line was fine
	}
	msg := err.Error()
	for _, s := range []string{"unknown flag", "unknown shorthand", "unknown command", "flag needs an argument",
		"invalid argument", "accepts ", "requires at least", "requires at most", "required flag"} {
		if strings.Contains(msg, s) {
			return true
		}
	}
	return false
}

func newRootCmd(stdout, stderr io.Writer) *cobra.Command {
	g := &globals{stdout: stdout, stderr: stderr}
	root := &cobra.Command{
		Use:   "hostd",
		Short: "hostd coordinates changes across the channels of a sharded system",
		Long: `hostd is a daemon that coordinates changes across the channels (shards,
queues) of a sharded system: atomic idempotent broadcasts with ack callbacks,
resource-key and lease locks with fencing, static topics with logic queues,
extended with WebAssembly plugins and traced with OpenTelemetry.

Run the daemon with "hostd serve"; every other command is a client of a
running daemon's HTTP API (--addr, --token).`,
		SilenceUsage:  true,
		SilenceErrors: true,
		PersistentPreRunE: func(cmd *cobra.Command, args []string) error {
			if g.output != "table" && g.output != "json" {
				return fmt.Errorf("invalid argument %q for -o: want table or json", g.output)
			}
			return nil
		},
	}
	root.SetOut(stdout)
	root.SetErr(stderr)
	pf := root.PersistentFlags()
	pf.StringVar(&g.addr, "addr", envOr("HOSTD_ADDR", "http://127.0.0.1:7070"), "address of the hostd API (env HOSTD_ADDR)")
	pf.StringVar(&g.token, "token", os.Getenv("HOSTD_TOKEN"), "bearer token for the API (env HOSTD_TOKEN)")
	pf.StringVarP(&g.output, "output", "o", "table", "output format: table or json")
	for _, c := range commands {
		root.AddCommand(c(g))
	}
	return root
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

// client returns an API client from the global flags.
func (g *globals) client() (*client.Client, error) {
	var opts []client.Option
	if g.token != "" {
		opts = append(opts, client.WithToken(g.token))
	}
	return client.New(g.addr, opts...)
}

// print writes v as JSON (-o json) or as a table of header and rows.
func (g *globals) print(v any, header []string, rows [][]string) error {
	if g.output == "json" {
		enc := json.NewEncoder(g.stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(v)
	}
	tw := tabwriter.NewWriter(g.stdout, 0, 4, 2, ' ', 0)
	if len(header) > 0 {
		fmt.Fprintln(tw, strings.Join(header, "\t"))
	}
	for _, r := range rows {
		fmt.Fprintln(tw, strings.Join(r, "\t"))
	}
	return tw.Flush()
}

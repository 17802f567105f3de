package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	"github.com/hostd-dev/hostd/internal/scaffold"
)

// addPluginAuthorCmds adds the plugin author's subcommands (new, build) to
// the `hostd plugin` noun. They work offline: no daemon is contacted.
func addPluginAuthorCmds(plugin *cobra.Command, g *globals) {
	plugin.AddCommand(newPluginNewCmd(g), newPluginBuildCmd(g))
}

func newPluginNewCmd(g *globals) *cobra.Command {
	var dir, sdk string
	cmd := &cobra.Command{
		Use:   "new NAME",
		Short: "Create a plugin project (Go module with an example handler, a test and a README)",
		Long: `Create a plugin project in ./NAME (or --dir): a Go module with an ack
callback and a validator, a test that runs them natively with sdk/sdktest,
and a README.

hostd's module is not published, so go.mod replaces it with a local hostd
checkout: the one this binary was built from when it can be found, or the
one given with --sdk.

Then: cd NAME && go test ./... && hostd plugin build .`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := scaffold.ValidName(args[0]); err != nil {
				return withCode(exitUsage, err)
			}
			out, err := scaffold.New(scaffold.Options{Name: args[0], Dir: dir, SDKPath: sdk})
			if err != nil {
				return err
			}
			rel := out
			if wd, err := os.Getwd(); err == nil {
				if r, err := filepath.Rel(wd, out); err == nil && !strings.HasPrefix(r, "..") {
					rel = r
				}
			}
			fmt.Fprintf(g.stdout, "created plugin %s in %s (message type %s)\n", args[0], out, scaffold.MessageType(args[0]))
			fmt.Fprintf(g.stdout, "next: cd %s && go test ./... && hostd plugin build .\n", rel)
			return nil
		},
	}
	cmd.Flags().StringVar(&dir, "dir", "", "directory to create (default ./NAME)")
	cmd.Flags().StringVar(&sdk, "sdk", "", "path to a hostd checkout for go.mod's replace directive (default: the checkout this binary was built from)")
	return cmd
}

func newPluginBuildCmd(g *globals) *cobra.Command {
	var out string
	cmd := &cobra.Command{
		Use:   "build [DIR]",
		Short: "Build a plugin to WebAssembly (GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared)",
		Long: `Build the plugin in DIR (default .) with

  GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -o OUT .

and check that the result exports hostd's ABI v1. OUT defaults to
./<base name of DIR>.wasm. Needs the go command on PATH.`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			dir := "."
			if len(args) == 1 {
				dir = args[0]
			}
			if out == "" {
				abs, err := filepath.Abs(dir)
				if err != nil {
					return err
				}
				out = filepath.Base(abs) + ".wasm"
			}
			path, err := scaffold.Build(cmd.Context(), scaffold.BuildOptions{Dir: dir, Out: out, Stdout: g.stderr, Stderr: g.stderr})
			if err != nil {
				return err
			}
			fmt.Fprintln(g.stdout, path)
			return nil
		},
	}
	// Named like the global -o/--output so that it shadows it here:
	// `hostd plugin build DIR -o x.wasm` is the documented form.
	cmd.Flags().StringVarP(&out, "output", "o", "", "output .wasm file (default ./<dir name>.wasm)")
	return cmd
}

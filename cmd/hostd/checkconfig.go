package main

import (
	"errors"
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/hostd-dev/hostd/host/config"
)

func newCheckConfigCmd(g *globals) *cobra.Command {
	var file string
	cmd := &cobra.Command{
		Use:   "check-config",
		Short: "Validate a configuration without starting hostd",
		Long: `Validate a configuration file (plus HOSTD_* environment variables, as
"serve" would read them) without starting anything. Every problem is
reported at once with its key path; the exit code is 3 when there are any.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			_, err := config.Load(config.Source{File: file})
			var ve *config.ValidationError
			if errors.As(err, &ve) {
				if g.output == "json" {
					_ = g.print(map[string]any{"ok": false, "problems": ve.Problems}, nil, nil)
				}
				return err
			}
			if err != nil {
				return err
			}
			if g.output == "json" {
				return g.print(map[string]any{"ok": true, "problems": []config.Problem{}}, nil, nil)
			}
			_, err = fmt.Fprintf(g.stdout, "%s: configuration is valid\n", nameOr(file))
			return err
		},
	}
	cmd.Flags().StringVarP(&file, "config", "c", os.Getenv("HOSTD_CONFIG"), "YAML config file to check (env HOSTD_CONFIG)")
	return cmd
}

func nameOr(file string) string {
	if file == "" {
		return "(defaults and environment)"
	}
	return file
}

package main

import (
	"github.com/spf13/cobra"

	"github.com/hostd-dev/hostd/docs"
)

func newAPICmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "api",
		Short: "The HTTP API's reference",
	}
	var local bool
	spec := &cobra.Command{
		Use:   "spec",
		Short: "Print the OpenAPI 3.1 document of the API (GET /v1/openapi.json)",
		Long: "Print the OpenAPI 3.1 document of hostd's HTTP API, as served by the daemon at --addr\n" +
			"(GET /v1/openapi.json, role read). With --local, print the copy built into this binary\n" +
			"(no daemon needed). Generate a client from it, or read it as the API's reference;\n" +
			"docs/api.md is the guide.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			b := docs.OpenAPI
			if !local {
				c, err := g.client()
				if err != nil {
					return err
				}
				if b, err = c.OpenAPI(cmd.Context()); err != nil {
					return err
				}
			}
			_, err := g.stdout.Write(b)
			return err
		},
	}
	spec.Flags().BoolVar(&local, "local", false, "print the document built into this binary instead of asking the daemon")
	cmd.AddCommand(spec)
	return cmd
}

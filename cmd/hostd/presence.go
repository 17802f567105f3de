package main

import (
	"errors"
	"os"

	"github.com/spf13/cobra"
)

// presenceTokenFlag adds --presence-token (env HOSTD_PRESENCE_TOKEN), kept
// apart from the global bearer --token (HOSTD_TOKEN).
func presenceTokenFlag(cmd *cobra.Command, token *string, usage string) {
	cmd.Flags().StringVar(token, "presence-token", os.Getenv("HOSTD_PRESENCE_TOKEN"), usage+" (env HOSTD_PRESENCE_TOKEN); --token is the API bearer token")
}

func newPresenceCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "presence",
		Short: "Who is looking at / editing a key: announce, withdraw, who",
		Long: `Presence entries are shared (many holders per key), expire unless announced
again within their TTL, and never block or are blocked by lease locks. The
first announce returns a token; pass it with --presence-token (or
HOSTD_PRESENCE_TOKEN) to refresh or withdraw. The global --token stays the
API bearer token.`,
	}
	cmd.AddCommand(newPresenceAnnounceCmd(g), newPresenceWithdrawCmd(g), newPresenceWhoCmd(g))
	return cmd
}

func newPresenceAnnounceCmd(g *globals) *cobra.Command {
	var holder, ttl, token string
	var meta []string
	cmd := &cobra.Command{
		Use:   "announce KEY",
		Short: "Announce (or refresh with --presence-token) your presence on a key",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			m, err := parseMeta(meta)
			if err != nil {
				return err
			}
			c, err := g.client()
			if err != nil {
				return err
			}
			e, err := c.Announce(cmd.Context(), args[0], holder, m, ttl, token)
			if err != nil {
				return err
			}
			return g.print(e, []string{"KEY", "HOLDER", "EXPIRES", "META", "TOKEN"},
				[][]string{{e.Key, e.Holder, fmtTime(e.ExpiresAt), fmtMeta(e.Meta), e.Token}})
		},
	}
	cmd.Flags().StringVar(&holder, "holder", defaultOwner(), "your name as shown to others")
	cmd.Flags().StringVar(&ttl, "ttl", "", "entry TTL, e.g. 30s: 1ms..locks.max_ttl (default: the server's)")
	presenceTokenFlag(cmd, &token, "token of your live entry, to refresh it")
	cmd.Flags().StringArrayVar(&meta, "meta", nil, "metadata KEY=VALUE (repeatable)")
	return cmd
}

func newPresenceWithdrawCmd(g *globals) *cobra.Command {
	var holder, token string
	cmd := &cobra.Command{
		Use:   "withdraw KEY",
		Short: "Withdraw your own presence entry",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if token == "" {
				return withCode(exitUsage, errors.New("the entry's token is required: --presence-token or HOSTD_PRESENCE_TOKEN (--token is the API bearer token)"))
			}
			c, err := g.client()
			if err != nil {
				return err
			}
			if err := c.Withdraw(cmd.Context(), args[0], holder, token); err != nil {
				return err
			}
			return g.print(map[string]any{"withdrawn": true}, nil, [][]string{{"withdrawn"}})
		},
	}
	cmd.Flags().StringVar(&holder, "holder", defaultOwner(), "your name as announced")
	presenceTokenFlag(cmd, &token, "the token your announce returned (required)")
	return cmd
}

func newPresenceWhoCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "who KEY",
		Short: "List who is present on a key",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := g.client()
			if err != nil {
				return err
			}
			es, err := c.Who(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			var rows [][]string
			for _, e := range es {
				rows = append(rows, []string{e.Holder, fmtTime(e.Since), fmtTime(e.ExpiresAt), fmtMeta(e.Meta)})
			}
			return g.print(es, []string{"HOLDER", "SINCE", "EXPIRES", "META"}, rows)
		},
	}
}

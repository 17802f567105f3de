package main

import (
	"errors"
	"strconv"

	"github.com/spf13/cobra"

	"github.com/hostd-dev/hostd/client"
)

func newGroupCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "group",
		Short: "Commit and inspect consumer group offsets (logic offsets, stable across remaps)",
	}
	cmd.AddCommand(newGroupCommitCmd(g), newGroupGetCmd(g), newGroupLagCmd(g))
	return cmd
}

var groupHeader = []string{"GROUP", "VCHANNEL", "COMMITTED", "OFFSET", "MIN", "MAX", "LAG", "EXPIRED"}

func groupRows(gs []client.GroupOffset) [][]string {
	var rows [][]string
	for _, o := range gs {
		rows = append(rows, []string{o.Group, o.VChannel, strconv.FormatBool(o.Committed), strconv.FormatUint(o.Offset, 10),
			strconv.FormatUint(o.Min, 10), strconv.FormatUint(o.Max, 10), strconv.FormatUint(o.Lag, 10), strconv.FormatBool(o.Expired)})
	}
	return rows
}

// groupArgs checks GROUP (and VCHANNEL when given) before any request,
// so a mistake is a usage error that names the argument.
func groupArgs(args []string) error {
	if args[0] == "" {
		return withCode(exitUsage, errors.New("GROUP: must not be empty"))
	}
	if len(args) > 1 {
		return vchannelArg(args[1])
	}
	return nil
}

func newGroupCommitCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "commit GROUP VCHANNEL OFFSET",
		Short: "Store the group's next offset to consume",
		Args:  cobra.ExactArgs(3),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := groupArgs(args); err != nil {
				return err
			}
			off, err := parseOffsetArg("OFFSET", args[2])
			if err != nil {
				return err
			}
			c, err := g.client()
			if err != nil {
				return err
			}
			o, err := c.CommitGroupOffset(cmd.Context(), args[0], args[1], off)
			if err != nil {
				return err
			}
			return g.print(o, groupHeader, groupRows([]client.GroupOffset{*o}))
		},
	}
}

func newGroupGetCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "get GROUP VCHANNEL",
		Short: "Show the group's offset, the queue's min/max and the lag",
		Args:  cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := groupArgs(args); err != nil {
				return err
			}
			c, err := g.client()
			if err != nil {
				return err
			}
			o, err := c.GetGroupOffset(cmd.Context(), args[0], args[1])
			if err != nil {
				return err
			}
			return g.print(o, groupHeader, groupRows([]client.GroupOffset{*o}))
		},
	}
}

func newGroupLagCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "lag GROUP TOPIC",
		Short: "Show the group's offset and lag on every logic queue of a topic",
		Args:  cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := groupArgs(args[:1]); err != nil {
				return err
			}
			c, err := g.client()
			if err != nil {
				return err
			}
			gs, err := c.GroupLag(cmd.Context(), args[0], args[1])
			if err != nil {
				return err
			}
			return g.print(gs, groupHeader, groupRows(gs))
		},
	}
}

package main

import (
	"encoding/json"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/hostd-dev/hostd/builtin/mapping"
	"github.com/hostd-dev/hostd/client"
)

func newChannelCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "channel",
		Short: "Read and append messages of a vchannel (logic queue topic/N)",
	}
	cmd.AddCommand(newChannelReadCmd(g), newChannelAppendCmd(g), newChannelBoundsCmd(g))
	return cmd
}

// vchannelArg checks a VCHANNEL argument before any request: a malformed
// one is a usage error (exit 2) that says what is expected.
func vchannelArg(vc string) error {
	if _, _, err := mapping.ParseVChannel(vc); err != nil {
		return withCode(exitUsage, fmt.Errorf("VCHANNEL %q: want topic/N, such as orders/0", vc))
	}
	return nil
}

func newChannelBoundsCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:     "bounds VCHANNEL",
		Short:   "Show a logic queue's retained range [min, max) of logic offsets",
		Example: `  hostd channel bounds orders/0`,
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := vchannelArg(args[0]); err != nil {
				return err
			}
			c, err := g.client()
			if err != nil {
				return err
			}
			b, err := c.ChannelBounds(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			return g.print(b, []string{"VCHANNEL", "MIN", "MAX"},
				[][]string{{b.VChannel, strconv.FormatUint(b.Min, 10), strconv.FormatUint(b.Max, 10)}})
		},
	}
}

func newChannelReadCmd(g *globals) *cobra.Command {
	var (
		from    uint64
		limit   int
		wait    time.Duration
		follow  bool
		markers bool
	)
	cmd := &cobra.Command{
		Use:   "read VCHANNEL [--from N] [--wait 10s] [--follow] [--markers]",
		Short: "Read messages from a logic offset (across segments); --follow keeps long-polling",
		Long: `Read messages from a logic offset (across segments); --follow keeps long-polling.

Each message has a kind: data (a client append), broadcast (the broadcast
engine), marker (written by hostd: a remap leaves a "remap" marker in each
moved queue) or legacy (written before kinds). Markers take an offset like
any message but carry no data: they are hidden unless --markers is given
(the KIND column, or "kind"/"marker" in -o json, tells them apart).`,
		Example: `  hostd channel read orders/0 --from 0
  hostd channel read orders/0 --from 0 --markers
  hostd channel read _control/0 --from 42 --follow -o json`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := vchannelArg(args[0]); err != nil {
				return err
			}
			if limit < 1 || limit > 1000 {
				return withCode(exitUsage, fmt.Errorf("--limit: want 1..1000, got %d", limit))
			}
			c, err := g.client()
			if err != nil {
				return err
			}
			if follow && wait == 0 {
				wait = 30 * time.Second
			}
			header := true
			for {
				res, err := c.ReadChannel(cmd.Context(), args[0], from, limit, wait)
				if err != nil {
					if follow && cmd.Context().Err() != nil {
						return nil
					}
					return err
				}
				if err := printMessages(g, res, header, markers); err != nil {
					return err
				}
				header = false
				from = res.Next
				if !follow {
					if res.Next < res.Max {
						fmt.Fprintf(g.stderr, "hostd: more messages: continue with --from %d (retained up to %d)\n", res.Next, res.Max)
					}
					return nil
				}
			}
		},
	}
	f := cmd.Flags()
	f.Uint64Var(&from, "from", 0, "logic offset to start at")
	f.IntVar(&limit, "limit", 100, "messages per request")
	f.DurationVar(&wait, "wait", 0, "long-poll this long when nothing is there yet (max 60s)")
	f.BoolVarP(&follow, "follow", "f", false, "keep reading as messages arrive (Ctrl-C to stop)")
	f.BoolVar(&markers, "markers", false, "also show marker messages (such as the remap marker)")
	return cmd
}

// printMessages prints one page of a read; marker messages only with
// markers (a note on stderr counts the hidden ones).
func printMessages(g *globals, res *client.ReadResult, header, markers bool) error {
	msgs := res.Messages
	if !markers {
		msgs = make([]client.Message, 0, len(res.Messages))
		for _, m := range res.Messages {
			if m.Kind != "marker" {
				msgs = append(msgs, m)
			}
		}
		if n := len(res.Messages) - len(msgs); n > 0 {
			fmt.Fprintf(g.stderr, "(%d marker message(s) hidden; --markers shows them)\n", n)
		}
	}
	if g.output == "json" {
		enc := json.NewEncoder(g.stdout)
		for _, m := range msgs {
			if err := enc.Encode(m); err != nil {
				return err
			}
		}
		return nil
	}
	var rows [][]string
	for _, m := range msgs {
		props := make([]string, 0, len(m.Properties))
		for k, v := range m.Properties {
			props = append(props, k+"="+v)
		}
		sort.Strings(props)
		kind := m.Kind
		if m.Marker != "" {
			kind += ":" + m.Marker
		}
		rows = append(rows, []string{strconv.FormatUint(m.Offset, 10), m.Time.Format(time.RFC3339Nano),
			fmt.Sprintf("%s@%d", m.Queue, m.QueueOffset), kind, strings.Join(props, ","), strconv.Quote(string(m.Payload))})
	}
	var h []string
	if header {
		h = []string{"OFFSET", "TIME", "PHYSICAL", "KIND", "PROPERTIES", "PAYLOAD"}
	}
	if len(rows) == 0 && header {
		fmt.Fprintf(g.stderr, "no messages at %d (retained [%d, %d))\n", res.Next, res.Min, res.Max)
		return nil
	}
	return g.print(nil, h, rows)
}

func newChannelAppendCmd(g *globals) *cobra.Command {
	var (
		req   client.AppendRequest
		props []string
	)
	cmd := &cobra.Command{
		Use:     "append VCHANNEL PAYLOAD...",
		Short:   "Append messages (one per PAYLOAD) to a logic queue",
		Example: `  hostd channel append orders/3 '{"id":1}' '{"id":2}' --producer p1 --seq 7`,
		Args:    cobra.MinimumNArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := vchannelArg(args[0]); err != nil {
				return err
			}
			pm := map[string]string{}
			for _, p := range props {
				k, v, ok := strings.Cut(p, "=")
				if !ok {
					return withCode(2, fmt.Errorf("property %q: want key=value", p))
				}
				pm[k] = v
			}
			for _, p := range args[1:] {
				r := client.ChannelRecord{PayloadText: p}
				if len(pm) > 0 {
					r.Properties = pm
				}
				req.Records = append(req.Records, r)
			}
			c, err := g.client()
			if err != nil {
				return err
			}
			res, err := c.AppendChannel(cmd.Context(), args[0], &req)
			if err != nil {
				return err
			}
			var rows [][]string
			for _, p := range res.Positions {
				rows = append(rows, []string{p.VChannel, strconv.FormatUint(p.Offset, 10), fmt.Sprintf("%s@%d", p.Queue, p.QueueOffset),
					strconv.FormatUint(uint64(p.Tick), 10), strconv.FormatBool(res.Duplicate)})
			}
			return g.print(res, []string{"VCHANNEL", "OFFSET", "PHYSICAL", "TIME TICK", "DUPLICATE"}, rows)
		},
	}
	f := cmd.Flags()
	f.StringArrayVarP(&props, "property", "p", nil, "property key=value for every message (repeatable)")
	f.StringVar(&req.ProducerID, "producer", "", "producer id (with --seq: a retry returns the original offsets)")
	f.Uint64Var(&req.Seq, "seq", 0, "producer sequence number (increasing per producer and queue)")
	return cmd
}

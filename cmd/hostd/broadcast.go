package main

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/hostd-dev/hostd/client"
)

func newBroadcastCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "broadcast",
		Short: "Submit and inspect atomic broadcasts",
		Long: "A broadcast sends one message to a set of vchannels (always including the control channel),\n" +
			"serialized by resource keys, idempotent by key, and runs the message type's ack callback once.",
	}
	cmd.AddCommand(newBroadcastSendCmd(g), newBroadcastGetCmd(g), newBroadcastLsCmd(g),
		newBroadcastAckCmd(g), newBroadcastAbandonCmd(g), newBroadcastRetryCmd(g), newBroadcastLocksCmd(g))
	return cmd
}

// parseKey reads "domain:key[:shared|exclusive]".
func parseKey(s string) (client.ResourceKey, error) {
	parts := strings.Split(s, ":")
	if len(parts) < 2 || len(parts) > 3 || parts[0] == "" || parts[1] == "" {
		return client.ResourceKey{}, fmt.Errorf("resource key %q: want domain:key[:shared|exclusive]", s)
	}
	k := client.ResourceKey{Domain: parts[0], Key: parts[1], Mode: "shared"}
	if len(parts) == 3 {
		k.Mode = parts[2]
	}
	return k, nil
}

func newBroadcastSendCmd(g *globals) *cobra.Command {
	var (
		req     client.BroadcastRequest
		keys    []string
		props   []string
		payload string
		ackSync bool
		timeout time.Duration
		scope   string
	)
	cmd := &cobra.Command{
		Use:   "send TYPE [VCHANNEL...]",
		Short: "Submit a broadcast and wait for it",
		Long: `Submit a broadcast and wait for it (--wait: done, appended or persisted).
Exit status: 0 when it was accepted (and, with --wait done, completed),
4 when the broadcast ended FAILED, 1 when the request failed, 2 on usage
errors.`,
		Example: `  hostd broadcast send noop orders/0 orders/1 --payload hello --key collection:db.orders:exclusive --idempotency-key req-42
  hostd broadcast send CreateCollection --payload '{"db":"db","name":"orders"}' --wait persisted`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			req.Type, req.VChannels, req.PayloadText = args[0], args[1:], payload
			for _, s := range keys {
				k, err := parseKey(s)
				if err != nil {
					return withCode(2, err)
				}
				req.ResourceKeys = append(req.ResourceKeys, k)
			}
			for _, p := range props {
				k, v, ok := strings.Cut(p, "=")
				if !ok {
					return withCode(2, fmt.Errorf("property %q: want key=value", p))
				}
				if req.Properties == nil {
					req.Properties = map[string]string{}
				}
				req.Properties[k] = v
			}
			if scope != "" {
				kind, id, _ := strings.Cut(scope, ":")
				req.Scope.Kind, req.Scope.ID = kind, id
			}
			if cmd.Flags().Changed("ack-sync-up") {
				req.AckSyncUp = &ackSync
			}
			if timeout > 0 {
				req.Timeout = timeout.String()
			}
			c, err := g.client()
			if err != nil {
				return err
			}
			res, err := c.SubmitBroadcast(cmd.Context(), &req)
			if err != nil {
				return err
			}
			rows := [][]string{{strconv.FormatUint(res.ID, 10), string(res.State), strconv.FormatBool(res.Duplicate), strconv.Itoa(len(res.Appends)), res.Error}}
			if res.TimedOut {
				fmt.Fprintf(g.stderr, "hostd: wait ended before %q; broadcast %d is persisted and will complete (hostd broadcast get %d)\n", req.Wait, res.ID, res.ID)
			}
			if err := g.print(res, []string{"ID", "STATE", "DUPLICATE", "APPENDS", "ERROR"}, rows); err != nil {
				return err
			}
			if res.State == "FAILED" {
				return withCode(exitFailed, fmt.Errorf("broadcast %d ended FAILED: %s", res.ID, res.Error))
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&payload, "payload", "", "message payload (text)")
	f.StringArrayVarP(&keys, "key", "k", nil, "resource key domain:key[:shared|exclusive] (repeatable)")
	f.StringArrayVarP(&props, "property", "p", nil, "message property key=value (repeatable)")
	f.StringVar(&req.IdempotencyKey, "idempotency-key", "", "retries with the same key return the original broadcast")
	f.StringVar(&scope, "scope", "", "idempotency scope: cluster (default), database:ID or collection:ID")
	f.BoolVar(&ackSync, "ack-sync-up", false, "wait for consumers to ack each vchannel (default: the type's setting)")
	f.StringVar(&req.Wait, "wait", "done", "return when done, appended or persisted")
	f.DurationVar(&timeout, "timeout", 0, "bound the wait (default: the server's request timeout)")
	return cmd
}

func taskRows(ts []client.BroadcastTask) [][]string {
	rows := make([][]string, 0, len(ts))
	for _, t := range ts {
		fin := ""
		if t.FinishedAt != nil {
			fin = fmtTime(*t.FinishedAt)
		}
		rows = append(rows, []string{strconv.FormatUint(t.ID, 10), t.Message.Type, string(t.State),
			strconv.Itoa(t.Attempts), fmtTime(t.CreatedAt), fin, t.LastError})
	}
	return rows
}

var taskHeader = []string{"ID", "TYPE", "STATE", "ATTEMPTS", "CREATED", "FINISHED", "LAST ERROR"}

func parseID(s string) (uint64, error) {
	id, err := strconv.ParseUint(s, 10, 64)
	if err != nil || id == 0 {
		return 0, withCode(2, fmt.Errorf("broadcast id must be a positive integer, got %q", s))
	}
	return id, nil
}

// broadcastByID is the shared part of the commands that act on one
// broadcast (get, ack, abandon, retry): parse the ID argument (exit code 2
// if it is not a positive integer), connect, call.
func (g *globals) broadcastByID(ctx context.Context, arg string,
	call func(*client.Client, context.Context, uint64) (*client.BroadcastTask, error)) (*client.BroadcastTask, error) {
	id, err := parseID(arg)
	if err != nil {
		return nil, err
	}
	c, err := g.client()
	if err != nil {
		return nil, err
	}
	return call(c, ctx, id)
}

// printTask prints the task a command got back as one task row.
func (g *globals) printTask(t *client.BroadcastTask, err error) error {
	if err != nil {
		return err
	}
	return g.print(t, taskHeader, taskRows([]client.BroadcastTask{*t}))
}

func newBroadcastGetCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "get ID",
		Short: "Show a broadcast: state, per-vchannel checkpoints and acks, attempts, errors, trace id",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			t, err := g.broadcastByID(cmd.Context(), args[0], (*client.Client).GetBroadcast)
			if err != nil {
				return err
			}
			if g.output == "json" {
				return g.print(t, nil, nil)
			}
			w := g.stdout
			fmt.Fprintf(w, "id:          %d\ntype:        %s\nstate:       %s\nattempts:    %d\n", t.ID, t.Message.Type, t.State, t.Attempts)
			if t.LastError != "" {
				fmt.Fprintf(w, "last error:  %s\n", t.LastError)
			}
			if t.NextRetry != nil {
				fmt.Fprintf(w, "next retry:  %s\n", t.NextRetry.Format(time.RFC3339Nano))
			}
			if t.Abandoned != nil {
				fmt.Fprintf(w, "abandoned:   by %s at %s: %s\n", t.Abandoned.By, fmtTime(t.Abandoned.At), t.Abandoned.Reason)
			}
			if t.TraceID != "" {
				fmt.Fprintf(w, "trace:       %s (hostd trace show %s)\n", t.TraceID, t.TraceID)
			}
			if len(t.MissingAcks) > 0 {
				fmt.Fprintf(w, "waiting for: %s\n", strings.Join(t.MissingAcks, ", "))
			}
			fmt.Fprintln(w)
			var rows [][]string
			for _, v := range t.VChannels {
				off, pq, tick := "-", "-", "-"
				if v.Checkpoint != nil {
					off, pq, tick = strconv.FormatUint(v.Checkpoint.Offset, 10), v.Checkpoint.PhysicalQueue, strconv.FormatUint(uint64(v.Checkpoint.TimeTick), 10)
				}
				rows = append(rows, []string{v.Name, off, pq, tick, strconv.FormatBool(v.Acked), strconv.Itoa(v.Attempts), v.LastError})
			}
			return g.print(t, []string{"VCHANNEL", "OFFSET", "QUEUE", "TIME TICK", "ACKED", "APPEND ATTEMPTS", "LAST ERROR"}, rows)
		},
	}
}

func newBroadcastLsCmd(g *globals) *cobra.Command {
	var (
		f    client.BroadcastFilter
		page client.Page
		all  bool
	)
	cmd := &cobra.Command{
		Use:   "ls",
		Short: "List broadcasts (filter by --state and --type)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := g.client()
			if err != nil {
				return err
			}
			var items []client.BroadcastTask
			next := ""
			for {
				l, err := c.ListBroadcasts(cmd.Context(), f, page)
				if err != nil {
					return err
				}
				items = append(items, l.Items...)
				next = l.NextPageToken
				if !all || next == "" {
					break
				}
				page.Token = next
			}
			if next != "" {
				fmt.Fprintf(g.stderr, "hostd: more results: --page-token %s (or --all)\n", next)
			}
			return g.print(client.List[client.BroadcastTask]{Items: items, NextPageToken: next}, taskHeader, taskRows(items))
		},
	}
	cmd.Flags().StringVar(&f.State, "state", "", "PENDING, TOMBSTONE or FAILED")
	cmd.Flags().StringVar(&f.Type, "type", "", "message type")
	cmd.Flags().IntVar(&page.Limit, "limit", 0, "page size (default 100, max 1000)")
	cmd.Flags().StringVar(&page.Token, "page-token", "", "continue a previous listing")
	cmd.Flags().BoolVar(&all, "all", false, "follow every page")
	return cmd
}

func newBroadcastAckCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "ack ID VCHANNEL",
		Short: "Ack one vchannel of an ack_sync_up broadcast (idempotent)",
		Args:  cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			return g.printTask(g.broadcastByID(cmd.Context(), args[0], func(c *client.Client, ctx context.Context, id uint64) (*client.BroadcastTask, error) {
				return c.AckBroadcast(ctx, id, args[1])
			}))
		},
	}
}

func newBroadcastAbandonCmd(g *globals) *cobra.Command {
	var reason string
	cmd := &cobra.Command{
		Use:   "abandon ID --reason TEXT",
		Short: "Give up a stuck PENDING broadcast: FAILED, locks released, who and why recorded (admin)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return g.printTask(g.broadcastByID(cmd.Context(), args[0], func(c *client.Client, ctx context.Context, id uint64) (*client.BroadcastTask, error) {
				return c.AbandonBroadcast(ctx, id, reason)
			}))
		},
	}
	cmd.Flags().StringVar(&reason, "reason", "", "why (recorded with the task; required)")
	_ = cmd.MarkFlagRequired("reason")
	return cmd
}

func newBroadcastRetryCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "retry ID",
		Short: "Re-run a FAILED broadcast: re-takes its locks, then PENDING again (admin)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return g.printTask(g.broadcastByID(cmd.Context(), args[0], (*client.Client).RetryBroadcast))
		},
	}
}

func newBroadcastLocksCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "locks [DOMAIN[:KEY]]",
		Short: "Show resource keys held or awaited by broadcasts: holder broadcast IDs, waiters, the key each waits for",
		Example: `  hostd broadcast locks
  hostd broadcast locks collection:shop.orders`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			var domain, key string
			if len(args) == 1 {
				domain, key, _ = strings.Cut(args[0], ":")
				if domain == "" {
					return withCode(2, fmt.Errorf("filter %q: want DOMAIN or DOMAIN:KEY", args[0]))
				}
			}
			c, err := g.client()
			if err != nil {
				return err
			}
			locks, err := c.BroadcastLocks(cmd.Context(), domain, key)
			if err != nil {
				return err
			}
			rows := [][]string{}
			for _, l := range locks {
				name := l.Domain + ":" + l.Key
				for _, h := range l.Holders {
					rows = append(rows, []string{name, "holder", strconv.FormatUint(h.BroadcastID, 10), h.Type, h.Mode, fmtTime(h.Since), ""})
				}
				for _, w := range l.Waiters {
					id, blocked := "-", ""
					if w.BroadcastID != 0 {
						id = strconv.FormatUint(w.BroadcastID, 10) + " (retry)"
					}
					if w.BlockedHere {
						blocked = "waits for this key"
					}
					rows = append(rows, []string{name, "waiter", id, w.Type, w.Mode, fmtTime(w.Since), blocked})
				}
			}
			return g.print(locks, []string{"KEY", "ROLE", "BROADCAST", "TYPE", "MODE", "SINCE", "NOTE"}, rows)
		},
	}
}

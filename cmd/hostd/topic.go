package main

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/hostd-dev/hostd/client"
)

func newTopicCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "topic",
		Short: "Create, grow, remap and inspect static topics",
		Long: "A static topic has a fixed number of logic queues (vchannels topic/N), each a chain of\n" +
			"segments on physical queues of brokers. Remaps move queues between brokers without moving\n" +
			"data; logic offsets stay continuous. Changes run as broadcasts under the topic's exclusive key.",
	}
	cmd.AddCommand(newTopicCreateCmd(g), newTopicGrowCmd(g), newTopicRemapCmd(g), newTopicDescribeCmd(g),
		newTopicLsCmd(g), newTopicOffsetsCmd(g), newTopicDeleteCmd(g), newTopicTranslateCmd(g))
	return cmd
}

func changeRows(ch *client.TopicChange) [][]string {
	moved := make([]string, len(ch.Moved))
	for i, q := range ch.Moved {
		moved[i] = strconv.Itoa(q)
	}
	return [][]string{{ch.Kind, ch.Topic, strconv.FormatUint(ch.Epoch, 10), strconv.FormatBool(ch.NoChange),
		strings.Join(moved, ","), strconv.FormatUint(ch.BroadcastID, 10)}}
}

var changeHeader = []string{"CHANGE", "TOPIC", "EPOCH", "NO CHANGE", "MOVED", "BROADCAST"}

func newTopicCreateCmd(g *globals) *cobra.Command {
	var req client.TopicRequest
	var maxAge time.Duration
	var maxBytes uint64
	cmd := &cobra.Command{
		Use:     "create TOPIC --queues N",
		Short:   "Create a static topic",
		Example: `  hostd topic create orders --queues 8 --brokers a,b,c --retention-age 24h`,
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			req.Topic = args[0]
			if maxAge < 0 {
				return withCode(exitUsage, fmt.Errorf("--retention-age: want a duration >= 0 such as 24h, got %s", maxAge))
			}
			if maxAge > 0 || maxBytes > 0 {
				req.Retention = &client.Retention{MaxBytes: maxBytes}
				if maxAge > 0 {
					req.Retention.MaxAge = maxAge.String()
				}
			}
			c, err := g.client()
			if err != nil {
				return err
			}
			ch, err := c.CreateTopic(cmd.Context(), &req)
			if err != nil {
				return err
			}
			return g.print(ch, changeHeader, changeRows(ch))
		},
	}
	f := cmd.Flags()
	f.IntVar(&req.Queues, "queues", 0, "number of logic queues (required)")
	f.StringSliceVar(&req.Brokers, "brokers", nil, "candidate brokers (default: every configured broker)")
	f.StringVar(&req.Policy, "policy", "", "mapping policy: balanced (default) or a plugin policy such as zone-spread")
	f.DurationVar(&maxAge, "retention-age", 0, "trim messages older than this (0 = keep)")
	f.Uint64Var(&maxBytes, "retention-bytes", 0, "keep at most this many bytes per logic queue (0 = keep)")
	f.BoolVar(&req.DryRun, "dry-run", false, "validate and show the result without changing anything")
	_ = cmd.MarkFlagRequired("queues")
	return cmd
}

func newTopicGrowCmd(g *globals) *cobra.Command {
	var req client.TopicRequest
	cmd := &cobra.Command{
		Use:   "grow TOPIC --queues N",
		Short: "Grow a topic to N logic queues (topics never shrink)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := g.client()
			if err != nil {
				return err
			}
			ch, err := c.GrowTopic(cmd.Context(), args[0], &req)
			if err != nil {
				return err
			}
			return g.print(ch, changeHeader, changeRows(ch))
		},
	}
	f := cmd.Flags()
	f.IntVar(&req.Queues, "queues", 0, "new total number of logic queues (required)")
	f.StringSliceVar(&req.Brokers, "brokers", nil, "brokers for the new queues (default: every configured broker)")
	f.StringVar(&req.Policy, "policy", "", "mapping policy (default: the topic's)")
	f.BoolVar(&req.DryRun, "dry-run", false, "validate without changing anything")
	_ = cmd.MarkFlagRequired("queues")
	return cmd
}

func newTopicRemapCmd(g *globals) *cobra.Command {
	var req client.TopicRequest
	cmd := &cobra.Command{
		Use:     "remap TOPIC --brokers a,b",
		Short:   "Move logic queues onto the target brokers (no data moves; offsets stay continuous)",
		Example: `  hostd topic remap orders --brokers b,c --dry-run`,
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := g.client()
			if err != nil {
				return err
			}
			ch, err := c.RemapTopic(cmd.Context(), args[0], &req)
			if err != nil {
				return err
			}
			return g.print(ch, changeHeader, changeRows(ch))
		},
	}
	f := cmd.Flags()
	f.StringSliceVar(&req.Brokers, "brokers", nil, "target brokers (default: every configured broker)")
	f.StringVar(&req.Policy, "policy", "", "mapping policy (default: the topic's)")
	f.BoolVar(&req.DryRun, "dry-run", false, "show which queues would move without changing anything")
	return cmd
}

func newTopicDeleteCmd(g *globals) *cobra.Command {
	var dryRun bool
	cmd := &cobra.Command{
		Use:   "delete TOPIC",
		Short: "Delete a topic, its messages, its consumer group offsets and producer states (admin)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := g.client()
			if err != nil {
				return err
			}
			var ch *client.TopicChange
			if dryRun {
				ch, err = c.DeleteTopicDryRun(cmd.Context(), args[0])
			} else {
				ch, err = c.DeleteTopic(cmd.Context(), args[0])
			}
			if err != nil {
				return err
			}
			return g.print(ch, changeHeader, changeRows(ch))
		},
	}
	cmd.Flags().BoolVar(&dryRun, "dry-run", false, "check that the topic can be deleted without deleting it")
	return cmd
}

// parseOffsetArg parses a non-negative integer argument (exit code 2 when
// it is not one).
func parseOffsetArg(name, v string) (uint64, error) {
	n, err := strconv.ParseUint(v, 10, 64)
	if err != nil {
		return 0, withCode(exitUsage, fmt.Errorf("%s: want a non-negative integer, got %q", name, v))
	}
	return n, nil
}

func newTopicTranslateCmd(g *globals) *cobra.Command {
	var physical bool
	cmd := &cobra.Command{
		Use:   "translate (VCHANNEL LOGIC_OFFSET | --physical BROKER/QUEUE_ID PHYSICAL_OFFSET)",
		Short: "Translate a logic offset to its segment, broker and physical offset, or back",
		Long: "Without --physical, shows where logic offset LOGIC_OFFSET of logic queue VCHANNEL (topic/N)\n" +
			"is stored: its segment, broker, physical queue and physical offset. With --physical, does the\n" +
			"reverse for a physical queue BROKER/QUEUE_ID (as shown by describe) and a physical offset.\n" +
			"RETAINED is false for a message retention has trimmed while its segment is still mapped.",
		Example: `  hostd topic translate orders/3 1500
  hostd topic translate --physical b/17 42`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			var tr *client.Translation
			if physical {
				i := strings.LastIndexByte(args[0], '/')
				if i <= 0 {
					return withCode(exitUsage, fmt.Errorf("physical queue %q: want BROKER/QUEUE_ID, such as b/17", args[0]))
				}
				id, err := parseOffsetArg("QUEUE_ID", args[0][i+1:])
				if err != nil {
					return err
				}
				off, err := parseOffsetArg("PHYSICAL_OFFSET", args[1])
				if err != nil {
					return err
				}
				c, err := g.client()
				if err != nil {
					return err
				}
				if tr, err = c.TranslatePhysical(cmd.Context(), args[0][:i], id, off); err != nil {
					return err
				}
			} else {
				if err := vchannelArg(args[0]); err != nil {
					return err
				}
				off, err := parseOffsetArg("LOGIC_OFFSET", args[1])
				if err != nil {
					return err
				}
				c, err := g.client()
				if err != nil {
					return err
				}
				if tr, err = c.TranslateLogic(cmd.Context(), args[0], off); err != nil {
					return err
				}
			}
			return g.print(tr, []string{"VCHANNEL", "LOGIC OFFSET", "BROKER", "PHYSICAL QUEUE", "PHYSICAL OFFSET", "SEGMENT", "GEN", "RETAINED"},
				[][]string{{tr.VChannel, strconv.FormatUint(tr.LogicOffset, 10), tr.Broker, tr.PhysicalQueue,
					strconv.FormatUint(tr.PhysicalOffset, 10), strconv.Itoa(tr.SegmentIndex), strconv.FormatUint(tr.Segment.Gen, 10),
					strconv.FormatBool(tr.Retained)}})
		},
	}
	cmd.Flags().BoolVar(&physical, "physical", false, "translate a physical queue BROKER/QUEUE_ID and offset to the logic queue and offset")
	return cmd
}

func fmtTimePtr(t *time.Time) string {
	if t == nil {
		return "-"
	}
	return t.Format(time.RFC3339Nano)
}

func newTopicDescribeCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "describe TOPIC",
		Short: "Show every logic queue's segments, offsets and the consumer groups' lag",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := g.client()
			if err != nil {
				return err
			}
			ti, err := c.DescribeTopic(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			if g.output == "json" {
				return g.print(ti, nil, nil)
			}
			fmt.Fprintf(g.stdout, "topic %s: %d queues, epoch %d, policy %s, created %s\n", ti.Topic.Name, ti.Topic.Queues,
				ti.Topic.Epoch, ti.Topic.Policy, fmtTime(ti.Topic.Created))
			if r := ti.Topic.Retention; r.MaxAge != "" || r.MaxBytes > 0 {
				fmt.Fprintf(g.stdout, "retention: max age %s, max bytes %d\n", r.MaxAge, r.MaxBytes)
			}
			var rows [][]string
			for _, q := range ti.Queues {
				for _, s := range q.Segments {
					end := "open"
					if s.EndOffset != nil {
						end = strconv.FormatUint(*s.EndOffset, 10)
					}
					rows = append(rows, []string{q.VChannel, strconv.FormatUint(q.Min, 10), strconv.FormatUint(q.Max, 10),
						strconv.FormatUint(s.Gen, 10), s.Broker, s.PhysicalQueue,
						fmt.Sprintf("[%d,%d)", s.LogicOffset, s.LogicEnd),
						fmt.Sprintf("%d..%s", s.StartOffset, end), fmtTimePtr(s.FirstTime), fmtTimePtr(s.LastTime)})
				}
			}
			if err := g.print(nil, []string{"VCHANNEL", "MIN", "MAX", "GEN", "BROKER", "PHYSICAL", "LOGIC", "PHYS START..END", "FIRST", "LAST"}, rows); err != nil {
				return err
			}
			if len(ti.Groups) > 0 {
				fmt.Fprintln(g.stdout)
				var grows [][]string
				for _, gr := range ti.Groups {
					grows = append(grows, []string{gr.Group, gr.VChannel, strconv.FormatUint(gr.Offset, 10), strconv.FormatUint(gr.Lag, 10), strconv.FormatBool(gr.Expired)})
				}
				return g.print(nil, []string{"GROUP", "VCHANNEL", "OFFSET", "LAG", "EXPIRED"}, grows)
			}
			return nil
		},
	}
}

func newTopicLsCmd(g *globals) *cobra.Command {
	var p client.Page
	cmd := &cobra.Command{
		Use:   "ls",
		Short: "List topics",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := g.client()
			if err != nil {
				return err
			}
			l, err := c.ListTopics(cmd.Context(), p)
			if err != nil {
				return err
			}
			var rows [][]string
			for _, t := range l.Items {
				rows = append(rows, []string{t.Name, strconv.Itoa(t.Queues), strconv.FormatUint(t.Epoch, 10), t.Policy, fmtTime(t.Created)})
			}
			if err := g.print(l, []string{"TOPIC", "QUEUES", "EPOCH", "POLICY", "CREATED"}, rows); err != nil {
				return err
			}
			if l.NextPageToken != "" && g.output == "table" {
				fmt.Fprintf(g.stderr, "more: --page-token %s\n", l.NextPageToken)
			}
			return nil
		},
	}
	cmd.Flags().IntVar(&p.Limit, "limit", 0, "page size (default 100)")
	cmd.Flags().StringVar(&p.Token, "page-token", "", "continue a listing")
	return cmd
}

func newTopicOffsetsCmd(g *globals) *cobra.Command {
	var at string
	cmd := &cobra.Command{
		Use:   "offsets TOPIC [--time RFC3339]",
		Short: "Show min/max logic offset per queue (and the offset at a time)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			var t time.Time
			if at != "" {
				var err error
				if t, err = time.Parse(time.RFC3339Nano, at); err != nil {
					return withCode(2, fmt.Errorf("--time: want RFC 3339, got %q", at))
				}
			}
			c, err := g.client()
			if err != nil {
				return err
			}
			qs, err := c.TopicOffsets(cmd.Context(), args[0], t)
			if err != nil {
				return err
			}
			var rows [][]string
			for _, q := range qs {
				r := []string{q.VChannel, strconv.FormatUint(q.Min, 10), strconv.FormatUint(q.Max, 10)}
				if q.AtTime != nil {
					r = append(r, strconv.FormatUint(*q.AtTime, 10))
				}
				rows = append(rows, r)
			}
			h := []string{"VCHANNEL", "MIN", "MAX"}
			if at != "" {
				h = append(h, "AT TIME")
			}
			return g.print(qs, h, rows)
		},
	}
	cmd.Flags().StringVar(&at, "time", "", "also show the first offset at or after this time")
	return cmd
}

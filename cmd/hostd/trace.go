package main

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/ptrace"

	"github.com/hostd-dev/hostd/client"
	"github.com/hostd-dev/hostd/host/config"
	"github.com/hostd-dev/hostd/host/tracestore"
	"github.com/hostd-dev/hostd/wire"
)

// traceFlags locate the span files: --data-dir, else the data directory of
// the config (--config plus HOSTD_* as "serve" reads them).
type traceFlags struct {
	dataDirs []string
	config   string
}

func (f *traceFlags) add(cmd *cobra.Command) {
	cmd.Flags().StringSliceVar(&f.dataDirs, "data-dir", nil, "hostd data directory holding traces/ (default: data.dir of the config, ./hostd-data); repeat it (or separate with commas) to merge cluster replicas' spans")
	cmd.Flags().StringVarP(&f.config, "config", "c", "", "YAML config file whose data.dir to read")
}

// offline reports whether the command reads span files (--data-dir or
// --config given) instead of asking a running daemon's API.
func (f *traceFlags) offline() bool { return len(f.dataDirs) > 0 || f.config != "" }

// warnMissing says on stderr which cluster replicas did not answer.
func warnMissing(g *globals, missing []string, what string) {
	if len(missing) > 0 {
		fmt.Fprintf(g.stderr, "hostd: warning: replica(s) %s did not answer: %s may lack their spans\n", strings.Join(missing, ", "), what)
	}
}

// load reads every span file. Damaged lines (a torn last line after a
// SIGKILL) are reported on stderr and skipped.
func (f *traceFlags) load(g *globals) (*tracestore.Store, error) {
	dirs := f.dataDirs
	if len(dirs) == 0 {
		cfg, err := config.Load(config.Source{File: f.config})
		if err != nil {
			return nil, err
		}
		dirs = []string{cfg.Data.Dir}
	}
	dir := strings.Join(dirs, ", ")
	st, err := tracestore.LoadDataDirs(dirs...)
	if err != nil {
		return nil, err
	}
	s := st.Stats()
	if s.Torn+s.Corrupt > 0 {
		fmt.Fprintf(g.stderr, "hostd: warning: skipped %d torn and %d corrupt line(s) in %s:\n", s.Torn, s.Corrupt, dir)
		ws := st.Warnings()
		for i, w := range ws {
			if i == 5 {
				fmt.Fprintf(g.stderr, "  … and %d more\n", len(ws)-5)
				break
			}
			fmt.Fprintf(g.stderr, "  %s\n", w)
		}
	}
	return st, nil
}

func newTraceCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "trace",
		Short: "Read the traces hostd recorded (show, ls, push)",
		Long: `Read the spans that hostd's embedded file exporter (the default,
telemetry.traces.exporter: file) writes as OTLP-JSON lines to
<data dir>/traces/. "show" and "ls" ask a running daemon's API by default
(--addr, --token; in cluster mode any replica merges every replica's spans);
with --data-dir or --config they read the files directly, which also works
on the data directory of a stopped daemon ("push" always reads the files).
See docs/tracing.md.`,
	}
	cmd.AddCommand(newTraceShowCmd(g), newTraceLsCmd(g), newTracePushCmd(g))
	return cmd
}

func newTraceShowCmd(g *globals) *cobra.Command {
	var tf traceFlags
	var asJSON, compact bool
	var width int
	cmd := &cobra.Command{
		Use:   "show <trace-id | broadcast-id>",
		Short: "Show a trace as a tree with a waterfall",
		Long: `Show one trace — by its 32-hex-digit trace id, or every trace of a
broadcast by its broadcast id (the hostd.broadcast.id attribute) — as a tree
with offsets, durations, a waterfall, kinds, attempts (hostd.attempt),
recovered attempts (hostd.recovered), status, errors, events and links.
A span whose parent is not in the files is shown under a
"(parent not exported)" node. --json prints OTLP-JSON (one TracesData).`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			var st *tracestore.Store
			var ids []pcommon.TraceID
			var err error
			if tf.offline() {
				if st, err = tf.load(g); err != nil {
					return err
				}
				if ids, err = st.Lookup(args[0]); err != nil {
					return err
				}
			} else if st, ids, err = fetchTrace(cmd.Context(), g, args[0]); err != nil {
				return err
			}
			if asJSON || g.output == "json" {
				return writeOTLP(g, st.OTLP(ids...))
			}
			for i, id := range ids {
				if i > 0 {
					fmt.Fprintln(g.stdout)
				}
				if err := tracestore.Render(g.stdout, st, id, tracestore.RenderOptions{Compact: compact, BarWidth: width}); err != nil {
					return err
				}
			}
			return nil
		},
	}
	tf.add(cmd)
	cmd.Flags().BoolVar(&asJSON, "json", false, "print OTLP-JSON instead of the tree")
	cmd.Flags().BoolVar(&compact, "compact", false, "one line per span (no attributes, events, links)")
	cmd.Flags().IntVar(&width, "width", 24, "width of the waterfall bar; 0 or less hides it")
	cmd.PreRunE = func(cmd *cobra.Command, args []string) error {
		if width <= 0 {
			width = -1
		}
		return nil
	}
	return cmd
}

// fetchTrace asks the API for a trace (or a broadcast's traces).
func fetchTrace(ctx context.Context, g *globals, id string) (*tracestore.Store, []pcommon.TraceID, error) {
	c, err := g.client()
	if err != nil {
		return nil, nil, err
	}
	t, err := c.GetTrace(ctx, id)
	if err != nil {
		return nil, nil, err
	}
	warnMissing(g, t.Missing, "the trace")
	st := tracestore.New()
	if err := st.AddJSON(t.OTLP, "api"); err != nil {
		return nil, nil, fmt.Errorf("trace show: the daemon's answer: %w", err)
	}
	var ids []pcommon.TraceID
	for _, s := range t.TraceIDs {
		if tid, ok := tracestore.ParseTraceID(s); ok {
			ids = append(ids, tid)
		}
	}
	return st, ids, nil
}

func writeOTLP(g *globals, td ptrace.Traces) error {
	var m ptrace.JSONMarshaler
	b, err := m.MarshalTraces(td)
	if err != nil {
		return fmt.Errorf("trace: encode OTLP-JSON: %w", err)
	}
	_, err = fmt.Fprintf(g.stdout, "%s\n", b)
	return err
}

func newTraceLsCmd(g *globals) *cobra.Command {
	var tf traceFlags
	var limit int
	var broadcast, root string
	var errorsOnly bool
	cmd := &cobra.Command{
		Use:   "ls",
		Short: "List recent traces",
		Long: `List the recorded traces, most recently started first: trace id, start,
root span name, duration, span count, error flag and broadcast id(s).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if !tf.offline() {
				return listTraces(cmd.Context(), g, client.TraceFilter{Broadcast: broadcast, Root: root, Errors: errorsOnly}, limit)
			}
			st, err := tf.load(g)
			if err != nil {
				return err
			}
			var sums []tracestore.Summary
			for _, s := range st.Summaries(0) {
				if errorsOnly && s.Errors == 0 {
					continue
				}
				if broadcast != "" && !slices.Contains(s.BroadcastIDs, broadcast) {
					continue
				}
				if root != "" && !strings.Contains(s.Root, root) {
					continue
				}
				sums = append(sums, s)
				if limit > 0 && len(sums) == limit {
					break
				}
			}
			if g.output == "json" {
				items := make([]wire.TraceSummary, 0, len(sums))
				for _, s := range sums {
					items = append(items, s.Wire())
				}
				return g.print(map[string]any{"items": items}, nil, nil)
			}
			return tracestore.WriteSummaries(g.stdout, sums)
		},
	}
	tf.add(cmd)
	cmd.Flags().IntVarP(&limit, "limit", "n", 20, "show at most this many traces (0 = all)")
	cmd.Flags().StringVar(&broadcast, "broadcast", "", "only traces of this broadcast id")
	cmd.Flags().BoolVar(&errorsOnly, "errors", false, "only traces with an error span")
	cmd.Flags().StringVar(&root, "root", "", "only traces whose root span name contains this (e.g. \"POST /v1/broadcasts\")")
	return cmd
}

func newTracePushCmd(g *globals) *cobra.Command {
	var tf traceFlags
	var endpoint string
	var headers []string
	var batch int
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:   "push --endpoint URL [trace-id | broadcast-id ...]",
		Short: "Post stored spans to an OTLP/HTTP collector",
		Long: `Post the stored spans (all of them, or the traces named by trace or
broadcast ids) to an OTLP/HTTP collector — Jaeger, Tempo, the OpenTelemetry
Collector — as binary protobuf to <endpoint>/v1/traces (an endpoint with a
path is used as is), in batches.`,
		RunE: func(cmd *cobra.Command, args []string) error {
			if endpoint == "" {
				return errors.New("required flag \"endpoint\" not set")
			}
			hdr := map[string]string{}
			for _, h := range headers {
				k, v, ok := strings.Cut(h, "=")
				if !ok || strings.TrimSpace(k) == "" {
					return fmt.Errorf("invalid argument %q for --header: want name=value", h)
				}
				hdr[strings.TrimSpace(k)] = v
			}
			st, err := tf.load(g)
			if err != nil {
				return err
			}
			var ids []pcommon.TraceID
			for _, a := range args {
				found, err := st.Lookup(a)
				if err != nil {
					return err
				}
				ids = append(ids, found...)
			}
			td := st.OTLP(ids...)
			if td.SpanCount() == 0 {
				return errors.New("trace push: no spans stored")
			}
			res, err := tracestore.Push(cmd.Context(), tracestore.PushConfig{
				Endpoint: endpoint, Headers: hdr, BatchSize: batch, Timeout: timeout,
			}, td)
			if err != nil {
				return fmt.Errorf("%w (%d spans sent before the failure)", err, res.Spans)
			}
			if g.output == "json" {
				return g.print(map[string]any{"requests": res.Requests, "spans": res.Spans, "rejected": res.Rejected}, nil, nil)
			}
			fmt.Fprintf(g.stdout, "pushed %d spans in %d request(s)", res.Spans, res.Requests)
			if res.Rejected > 0 {
				fmt.Fprintf(g.stdout, "; the collector rejected %d", res.Rejected)
			}
			fmt.Fprintln(g.stdout)
			return nil
		},
	}
	tf.add(cmd)
	cmd.Flags().StringVar(&endpoint, "endpoint", "", "OTLP/HTTP collector URL, e.g. http://localhost:4318 (required)")
	cmd.Flags().StringArrayVarP(&headers, "header", "H", nil, "header name=value sent with every request (repeatable)")
	cmd.Flags().IntVar(&batch, "batch-size", 512, "spans per request")
	cmd.Flags().DurationVar(&timeout, "timeout", 10*time.Second, "deadline of one request")
	return cmd
}

// listTraces pages through GET /v1/traces until limit traces (0: all).
func listTraces(ctx context.Context, g *globals, f client.TraceFilter, limit int) error {
	c, err := g.client()
	if err != nil {
		return err
	}
	items := []wire.TraceSummary{}
	var missing []string
	page := client.Page{}
	for {
		page.Limit = 1000
		if limit > 0 {
			page.Limit = min(1000, limit-len(items))
		}
		res, err := c.ListTraces(ctx, f, page)
		if err != nil {
			return err
		}
		items = append(items, res.Items...)
		for _, m := range res.Missing {
			if !slices.Contains(missing, m) {
				missing = append(missing, m)
			}
		}
		if res.NextPageToken == "" || (limit > 0 && len(items) >= limit) {
			break
		}
		page.Token = res.NextPageToken
	}
	warnMissing(g, missing, "the list")
	if g.output == "json" {
		return g.print(map[string]any{"items": items}, nil, nil)
	}
	sums := make([]tracestore.Summary, len(items))
	for i, it := range items {
		sums[i] = tracestore.SummaryFromWire(it)
	}
	return tracestore.WriteSummaries(g.stdout, sums)
}

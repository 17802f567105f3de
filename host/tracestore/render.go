package tracestore

import (
	"fmt"
	"io"
	"sort"
	"strings"
	"time"
	"unicode/utf8"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/ptrace"
)

// RenderOptions tunes Render.
type RenderOptions struct {
	// Compact hides the attribute, event and link lines under each span.
	Compact bool
	// BarWidth is the width of the waterfall bar; 0 means 24, <0 hides it.
	BarWidth int
}

// Node is one node of a span tree. Span is nil for a synthetic node standing
// for a parent that is not in the files (MissingParent says which one).
type Node struct {
	Span          *Span
	MissingParent pcommon.SpanID
	Children      []*Node
}

// Name returns the span name, or the marker of a missing parent.
func (n *Node) Name() string {
	if n.Span == nil {
		return "(parent not exported)"
	}
	return n.Span.Name()
}

func (n *Node) start() pcommon.Timestamp {
	if n.Span != nil {
		return n.Span.StartTimestamp()
	}
	if len(n.Children) > 0 {
		return n.Children[0].start()
	}
	return 0
}

// BuildTree arranges spans of one trace into trees: spans without a parent
// are roots; spans whose parent is missing hang under one synthetic node per
// missing parent. Siblings are ordered by start time, then span id.
func BuildTree(spans []*Span) []*Node {
	spans = append([]*Span(nil), spans...)
	sortSpans(spans)
	nodes := make(map[pcommon.SpanID]*Node, len(spans))
	for _, s := range spans {
		if _, dup := nodes[s.SpanID()]; !dup {
			nodes[s.SpanID()] = &Node{Span: s}
		}
	}
	var roots []*Node
	missing := map[pcommon.SpanID]*Node{}
	for _, s := range spans {
		n := nodes[s.SpanID()]
		if n.Span != s {
			continue
		}
		pid := s.ParentSpanID()
		switch {
		case pid.IsEmpty():
			roots = append(roots, n)
		case nodes[pid] != nil && pid != s.SpanID():
			p := nodes[pid]
			p.Children = append(p.Children, n)
		default:
			m := missing[pid]
			if m == nil {
				m = &Node{MissingParent: pid}
				missing[pid] = m
				roots = append(roots, m)
			}
			m.Children = append(m.Children, n)
		}
	}
	// A cycle of parent ids (only in forged files) leaves spans unreachable
	// from any root; attach them under a missing-parent node so none is lost.
	reached := map[*Node]bool{}
	var walk func(n *Node)
	walk = func(n *Node) {
		if reached[n] {
			return
		}
		reached[n] = true
		for _, c := range n.Children {
			walk(c)
		}
	}
	for _, r := range roots {
		walk(r)
	}
	for _, s := range spans {
		n := nodes[s.SpanID()]
		if n.Span == s && !reached[n] {
			for _, other := range nodes {
				other.Children = removeNode(other.Children, n)
			}
			m := &Node{MissingParent: s.ParentSpanID(), Children: []*Node{n}}
			roots = append(roots, m)
			walk(m)
		}
	}
	sort.SliceStable(roots, func(i, j int) bool { return roots[i].start() < roots[j].start() })
	return roots
}

func removeNode(list []*Node, n *Node) []*Node {
	out := list[:0]
	for _, c := range list {
		if c != n {
			out = append(out, c)
		}
	}
	return out
}

// NameTree renders the tree as indented span names, one per line — the shape
// of a trace without timings, for tests and diffs.
func NameTree(roots []*Node) string {
	var b strings.Builder
	var walk func(n *Node, depth int)
	walk = func(n *Node, depth int) {
		b.WriteString(strings.Repeat("  ", depth))
		b.WriteString(n.Name())
		b.WriteByte('\n')
		for _, c := range n.Children {
			walk(c, depth+1)
		}
	}
	for _, r := range roots {
		walk(r, 0)
	}
	return b.String()
}

// Render writes one trace as a tree with a waterfall.
func Render(w io.Writer, st *Store, id pcommon.TraceID, opt RenderOptions) error {
	spans := st.Trace(id)
	if len(spans) == 0 {
		return fmt.Errorf("%w: trace %s", ErrNotFound, id)
	}
	sum := st.Summary(id)
	r := renderer{st: st, w: w, opt: opt, t0: pcommon.NewTimestampFromTime(sum.Start), total: sum.Duration}
	if r.opt.BarWidth == 0 {
		r.opt.BarWidth = 24
	}
	head := fmt.Sprintf("trace %s  %d spans  %s", id, sum.Spans, fmtDur(sum.Duration))
	if sum.Errors > 0 {
		head += fmt.Sprintf("  %d error(s)", sum.Errors)
	}
	if len(sum.BroadcastIDs) > 0 {
		head += "  broadcast " + strings.Join(sum.BroadcastIDs, ",")
	}
	r.printf("%s\nstarted %s\n\n", head, sum.Start.UTC().Format(time.RFC3339Nano))
	bar := ""
	if r.opt.BarWidth > 0 {
		bar = " " + padRight("waterfall", r.opt.BarWidth+2)
	}
	r.printf("%10s %10s%s  span\n", "offset", "duration", bar)
	roots := BuildTree(spans)
	for i, n := range roots {
		r.node(n, "", i == len(roots)-1, true, false)
	}
	return r.err
}

type renderer struct {
	st    *Store
	w     io.Writer
	opt   RenderOptions
	t0    pcommon.Timestamp
	total time.Duration
	err   error
}

func (r *renderer) printf(format string, a ...any) {
	if r.err == nil {
		_, r.err = fmt.Fprintf(r.w, format, a...)
	}
}

func (r *renderer) node(n *Node, prefix string, last, top, missingParent bool) {
	branch, cont := "├─ ", "│  "
	if last {
		branch, cont = "└─ ", "   "
	}
	if top {
		branch, cont = "", ""
	}
	childPrefix := prefix + cont
	if n.Span == nil {
		pad := fmt.Sprintf("%10s %10s", "", "")
		if r.opt.BarWidth > 0 {
			pad += " " + strings.Repeat(" ", r.opt.BarWidth+2)
		}
		r.printf("%s  %s%s(parent not exported) span %s\n", pad, prefix, branch, n.MissingParent)
	} else {
		r.span(n.Span, prefix+branch, childPrefix, len(n.Children) > 0, missingParent)
	}
	prevInst := ""
	for i, c := range n.Children {
		if inst := instanceOf(c); inst != "" {
			if prevInst != "" && inst != prevInst {
				r.restartLine(childPrefix, prevInst, inst)
			}
			prevInst = inst
		}
		r.node(c, childPrefix, i == len(n.Children)-1, false, n.Span == nil)
	}
}

// instanceOf is the service.instance.id of a node's span (of its first
// child for a missing-parent node).
func instanceOf(n *Node) string {
	if n.Span == nil {
		if len(n.Children) == 0 {
			return ""
		}
		return instanceOf(n.Children[0])
	}
	if v, ok := n.Span.Resource.Attributes().Get("service.instance.id"); ok {
		return v.AsString()
	}
	return ""
}

// restartLine marks, between two siblings, that they were exported by
// different hostd starts (the process was restarted in between).
func (r *renderer) restartLine(prefix, from, to string) {
	pad := fmt.Sprintf("%10s %10s", "", "")
	if r.opt.BarWidth > 0 {
		pad += " " + strings.Repeat(" ", r.opt.BarWidth+2)
	}
	r.printf("%s  %s┄┄ restart: instance %s → %s ┄┄\n", pad, prefix+"│  ", from, to)
}

// span prints one span; remoteMark says to flag a remote parent (only
// useful when that parent is not in the files: a caller in another
// service).
func (r *renderer) span(s *Span, prefix, detailPrefix string, hasChildren, remoteMark bool) {
	start, end := s.StartTimestamp(), s.EndTimestamp()
	off := time.Duration(0)
	if start > r.t0 {
		off = time.Duration(start - r.t0)
	}
	dur := time.Duration(0)
	if end > start {
		dur = time.Duration(end - start)
	}
	line := fmt.Sprintf("%10s %10s", "+"+fmtDur(off), fmtDur(dur))
	if r.opt.BarWidth > 0 {
		line += " |" + r.bar(off, dur) + "|"
	}
	line += "  " + prefix + s.Name() + "  " + kindName(s.Kind())
	if v, ok := s.Attr(AttrAttempt); ok {
		line += "  attempt=" + v
	}
	if v, ok := s.Attr(AttrRecovered); ok && v == "true" {
		line += "  recovered"
	}
	if p := s.ParentSpanID(); remoteMark && !p.IsEmpty() && s.Flags()&0x300 == 0x300 {
		line += "  (remote parent)"
	}
	switch s.Status().Code() {
	case ptrace.StatusCodeError:
		line += "  ERROR"
		if m := s.Status().Message(); m != "" {
			line += ": " + oneLine(m)
		}
	case ptrace.StatusCodeOk:
		line += "  OK"
	}
	r.printf("%s\n", line)
	if r.opt.Compact {
		return
	}
	pad := fmt.Sprintf("%10s %10s", "", "")
	if r.opt.BarWidth > 0 {
		pad += " " + strings.Repeat(" ", r.opt.BarWidth+2)
	}
	dp := pad + "  " + detailPrefix
	if hasChildren {
		dp += "│ "
	} else {
		dp += "  "
	}
	if s.Attributes().Len() > 0 {
		r.printf("%s%s\n", dp, fmtAttrs(s.Attributes(), AttrAttempt, AttrRecovered))
	}
	evs := s.Events()
	for i := 0; i < evs.Len(); i++ {
		ev := evs.At(i)
		eoff := time.Duration(0)
		if ev.Timestamp() > r.t0 {
			eoff = time.Duration(ev.Timestamp() - r.t0)
		}
		txt := fmt.Sprintf("• +%s %s", fmtDur(eoff), ev.Name())
		if ev.Attributes().Len() > 0 {
			txt += " " + fmtAttrs(ev.Attributes())
		}
		r.printf("%s%s\n", dp, txt)
	}
	lks := s.Links()
	for i := 0; i < lks.Len(); i++ {
		l := lks.At(i)
		txt := fmt.Sprintf("↪ link trace %s span %s", l.TraceID(), l.SpanID())
		if t, ok := r.st.Span(l.TraceID(), l.SpanID()); ok {
			txt += " (" + t.Name() + ")"
		} else {
			txt += " (not exported)"
		}
		if l.TraceID() == s.TraceID() {
			txt += " same trace"
		}
		if l.Attributes().Len() > 0 {
			txt += " " + fmtAttrs(l.Attributes())
		}
		r.printf("%s%s\n", dp, txt)
	}
}

func (r *renderer) bar(off, dur time.Duration) string {
	w := r.opt.BarWidth
	cells := []rune(strings.Repeat(" ", w))
	if r.total <= 0 {
		cells[0] = '█'
		return string(cells)
	}
	from := int(int64(off) * int64(w) / int64(r.total))
	to := int((int64(off) + int64(dur)) * int64(w) / int64(r.total))
	from = min(max(from, 0), w-1)
	to = min(max(to, from+1), w)
	for i := from; i < to; i++ {
		cells[i] = '█'
	}
	return string(cells)
}

func kindName(k ptrace.SpanKind) string {
	switch k {
	case ptrace.SpanKindServer:
		return "SERVER"
	case ptrace.SpanKindClient:
		return "CLIENT"
	case ptrace.SpanKindProducer:
		return "PRODUCER"
	case ptrace.SpanKindConsumer:
		return "CONSUMER"
	case ptrace.SpanKindInternal:
		return "INTERNAL"
	default:
		return "UNSPECIFIED"
	}
}

// fmtAttrs renders attributes sorted by key as k=v, skipping the given keys.
func fmtAttrs(m pcommon.Map, skip ...string) string {
	type kv struct{ k, v string }
	var kvs []kv
	for k, v := range m.All() {
		if contains(skip, k) {
			continue
		}
		s := v.AsString()
		if v.Type() == pcommon.ValueTypeStr {
			s = quoteIfNeeded(s)
		}
		kvs = append(kvs, kv{k, s})
	}
	sort.Slice(kvs, func(i, j int) bool { return kvs[i].k < kvs[j].k })
	parts := make([]string, len(kvs))
	for i, p := range kvs {
		parts[i] = p.k + "=" + p.v
	}
	return strings.Join(parts, " ")
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func quoteIfNeeded(s string) string {
	if s == "" || strings.ContainsAny(s, " \t\n\r\"=") {
		return fmt.Sprintf("%q", s)
	}
	return s
}

func oneLine(s string) string {
	s = strings.ReplaceAll(s, "\r", " ")
	return strings.ReplaceAll(s, "\n", " ")
}

func padRight(s string, n int) string {
	if len(s) >= n {
		return s
	}
	return s + strings.Repeat(" ", n-len(s))
}

// fmtDur prints a duration with three significant decimals in a fitting
// unit: 850µs, 12.345ms, 1.500s, 2m3.000s.
func fmtDur(d time.Duration) string {
	switch {
	case d == 0:
		return "0s"
	case d < time.Microsecond:
		return fmt.Sprintf("%dns", d.Nanoseconds())
	case d < time.Millisecond:
		return fmt.Sprintf("%dµs", d.Microseconds())
	case d < time.Second:
		return fmt.Sprintf("%.3fms", float64(d)/float64(time.Millisecond))
	case d < time.Minute:
		return fmt.Sprintf("%.3fs", d.Seconds())
	default:
		m := d / time.Minute
		return fmt.Sprintf("%dm%.3fs", m, (d - m*time.Minute).Seconds())
	}
}

// WriteSummaries writes a table of traces (for `hostd trace ls`).
func WriteSummaries(w io.Writer, sums []Summary) error {
	roots := make([]string, len(sums))
	width := len("ROOT")
	for i, s := range sums {
		roots[i] = s.Root
		if s.RootMissing {
			roots[i] += " (root not exported)"
		}
		width = max(width, utf8.RuneCountInString(roots[i]))
	}
	if _, err := fmt.Fprintf(w, "%-32s  %-24s  %-*s  %10s  %5s  %-5s  %s\n",
		"TRACE ID", "START", width, "ROOT", "DURATION", "SPANS", "ERROR", "BROADCAST"); err != nil {
		return err
	}
	for i, s := range sums {
		root := roots[i]
		errFlag := "-"
		if s.Errors > 0 {
			errFlag = fmt.Sprintf("yes:%d", s.Errors)
		}
		b := strings.Join(s.BroadcastIDs, ",")
		if b == "" {
			b = "-"
		}
		if _, err := fmt.Fprintf(w, "%-32s  %-24s  %-*s  %10s  %5d  %-5s  %s\n",
			s.TraceID, s.Start.UTC().Format("2006-01-02T15:04:05.000Z"), width, root, fmtDur(s.Duration), s.Spans, errFlag, b); err != nil {
			return err
		}
	}
	return nil
}

package cluster

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/hostd-dev/hostd/host/api"
	"github.com/hostd-dev/hostd/host/tracestore"
	"github.com/hostd-dev/hostd/wire"
)

// clusterTraces serves the trace routes on a replica's front server. Each
// replica writes its own span files, so a broadcast that moved between
// leaders (or was submitted through a follower) has spans on several
// machines: a request fans out to every member and the answers are
// merged; a request from another replica (hop header) is answered from
// this replica's files alone.
type clusterTraces struct {
	n     *Node
	local *api.LocalTraces
}

func (t *clusterTraces) ListTraces(r *http.Request, q tracestore.Query) (*wire.TracePage, error) {
	if r.Header.Get(HopHeader) != "" {
		return t.local.ListTraces(r, q)
	}
	calls, err := t.n.fanOut(r, "traces_list", "/v1/traces?"+api.TraceQueryValues(q).Encode())
	if err != nil {
		return nil, err
	}
	members, missing := traceMembers(calls)
	type merged struct {
		sum wire.TraceSummary
		end time.Time
	}
	byID := map[string]*merged{}
	more := false
	for _, c := range calls {
		if c.outcome != outcomeOK {
			continue
		}
		var page wire.TracePage
		if err := json.Unmarshal(c.body, &page); err != nil {
			markError(members, &missing, c, fmt.Errorf("undecodable answer: %v", err))
			continue
		}
		more = more || page.NextPageToken != ""
		for _, s := range page.Items {
			d, _ := time.ParseDuration(s.Duration)
			m := byID[s.TraceID]
			if m == nil {
				s.BroadcastIDs = slices.Clone(s.BroadcastIDs)
				byID[s.TraceID] = &merged{sum: s, end: s.Start.Add(d)}
				continue
			}
			mergeSummary(&m.sum, &m.end, s, d)
		}
	}
	items := make([]wire.TraceSummary, 0, len(byID))
	for _, m := range byID {
		m.sum.Duration = m.end.Sub(m.sum.Start).String()
		// A trace whose spans on another member start before the
		// cursor was on an earlier page already.
		if c, err := tracestore.CursorOf(m.sum); err == nil && q.After != nil && q.After.Before(c.StartNS, c.TraceID) {
			continue
		}
		items = append(items, m.sum)
	}
	slices.SortFunc(items, func(a, b wire.TraceSummary) int {
		if c := b.Start.Compare(a.Start); c != 0 {
			return c
		}
		return strings.Compare(a.TraceID, b.TraceID)
	})
	next := ""
	if len(items) > q.Limit {
		items, more = items[:q.Limit], true
	}
	if more && len(items) > 0 {
		if c, err := tracestore.CursorOf(items[len(items)-1]); err == nil {
			next = c.Token()
		}
	}
	return &wire.TracePage{Items: items, NextPageToken: next, Members: members, Missing: missing}, nil
}

// mergeSummary folds another member's summary of the same trace into m.
// Span and error counts add up (each replica exports only its own spans).
func mergeSummary(m *wire.TraceSummary, end *time.Time, s wire.TraceSummary, d time.Duration) {
	if m.RootMissing && !s.RootMissing {
		m.Root, m.RootMissing = s.Root, false
	}
	if s.Start.Before(m.Start) {
		if m.RootMissing && s.RootMissing {
			m.Root = s.Root // the earliest span names a rootless trace
		}
		m.Start = s.Start
	}
	if e := s.Start.Add(d); e.After(*end) {
		*end = e
	}
	m.Spans += s.Spans
	m.Errors += s.Errors
	for _, b := range s.BroadcastIDs {
		if !slices.Contains(m.BroadcastIDs, b) {
			m.BroadcastIDs = append(m.BroadcastIDs, b)
		}
	}
}

func (t *clusterTraces) GetTrace(r *http.Request, id string) (*wire.Trace, error) {
	if r.Header.Get(HopHeader) != "" {
		return t.local.GetTrace(r, id)
	}
	st := tracestore.New()
	members, missing, found, err := t.gather(r, st, id)
	if err != nil {
		return nil, err
	}
	// A broadcast id is resolved by each replica from its own spans'
	// hostd.broadcast.id attribute, which only some spans carry (a
	// follower's "forward to leader" span does not): ask again by the
	// trace ids found, so every replica's spans of those traces come.
	if _, isTrace := tracestore.ParseTraceID(strings.ToLower(id)); !isTrace {
		for _, tid := range found {
			more, miss, _, err := t.gather(r, st, tid)
			if err != nil {
				return nil, err
			}
			for _, m := range more {
				i := slices.IndexFunc(members, func(x wire.TraceMember) bool { return x.Name == m.Name })
				switch {
				case i < 0:
					members = append(members, m) // joined meanwhile
				case m.Outcome != outcomeOK && members[i].Outcome == outcomeOK:
					members[i] = m
				}
			}
			missing = append(missing, miss...)
		}
		slices.Sort(missing)
		missing = slices.Compact(missing)
	}
	out, err := st.Answer(id)
	if err != nil {
		if len(missing) > 0 {
			return nil, api.NotFound("no span of %q on the members that answered; %s did not answer", id, strings.Join(missing, ", ")).
				With("missing", strings.Join(missing, ",")).Wrap(err)
		}
		return nil, err
	}
	out.Members, out.Missing = members, missing
	return &out, nil
}

// gather asks every member for id and adds their spans to st. It returns
// each member's outcome, the names of those that did not answer, and the
// trace ids found.
func (t *clusterTraces) gather(r *http.Request, st *tracestore.Store, id string) ([]wire.TraceMember, []string, []string, error) {
	calls, err := t.n.fanOut(r, "traces_get", "/v1/traces/"+url.PathEscape(id))
	if err != nil {
		return nil, nil, nil, err
	}
	// A member that has none of the trace's spans answers 404: that is
	// an answer, not an error.
	for _, c := range calls {
		if c.status == http.StatusNotFound && isCode(c.body, api.CodeNotFound) {
			c.outcome, c.err = outcomeOK, nil
			c.body = nil
		}
	}
	members, missing := traceMembers(calls)
	var found []string
	for _, c := range calls {
		if c.outcome != outcomeOK || c.body == nil {
			continue
		}
		var part wire.Trace
		if err := json.Unmarshal(c.body, &part); err != nil {
			markError(members, &missing, c, fmt.Errorf("undecodable answer: %v", err))
			continue
		}
		if err := st.AddJSON(part.OTLP, c.member.Name); err != nil {
			markError(members, &missing, c, err)
			continue
		}
		for _, tid := range part.TraceIDs {
			if !slices.Contains(found, tid) {
				found = append(found, tid)
			}
		}
	}
	return members, missing, found, nil
}

// traceMembers lists every member's outcome and the names of those whose
// spans are missing from the answer.
func traceMembers(calls []*memberCall) ([]wire.TraceMember, []string) {
	members := make([]wire.TraceMember, len(calls))
	var missing []string
	for i, c := range calls {
		members[i] = wire.TraceMember{Name: c.member.Name, Address: c.member.Address, Outcome: c.outcome}
		if c.outcome != outcomeOK {
			if c.err != nil {
				members[i].Error = c.err.Error()
			}
			missing = append(missing, c.member.Name)
		}
	}
	return members, missing
}

func markError(members []wire.TraceMember, missing *[]string, c *memberCall, err error) {
	c.outcome, c.err = outcomeError, err
	for i := range members {
		if members[i].Name == c.member.Name {
			members[i].Outcome, members[i].Error = outcomeError, err.Error()
		}
	}
	*missing = append(*missing, c.member.Name)
}

// isCode reports whether an error answer has the given code.
func isCode(body []byte, code string) bool {
	var er wire.ErrorResponse
	return json.Unmarshal(bytes.TrimSpace(body), &er) == nil && er.Error != nil && er.Error.Code == code
}

package host

import (
	"context"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hostd-dev/hostd/client"
	"github.com/hostd-dev/hostd/host/config"
	"github.com/hostd-dev/hostd/host/tracestore"
)

// GET /v1/traces and GET /v1/traces/{id} on an embedded daemon: the spans
// of a broadcast come back by broadcast id and by trace id (as OTLP-JSON
// the tracestore reads), the list pages newest first without gaps or
// repeats, an unknown id is 404, a read token may read and no token is
// refused.
func TestTraceRoutesEmbedded(t *testing.T) {
	cfg := testConfig(t)
	cfg.API.Tokens = []config.Token{
		{Name: "r", Token: "read-secret-0123456789", Role: "read"},
		{Name: "w", Token: "write-secret-0123456789", Role: "write"},
	}
	h := startHost(t, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	w, _ := client.New(h.URL(), client.WithToken("write-secret-0123456789"))
	r, _ := client.New(h.URL(), client.WithToken("read-secret-0123456789"))

	var ids []uint64
	for i := range 5 {
		res, err := w.SubmitBroadcast(ctx, &client.BroadcastRequest{Type: "noop", PayloadText: strconv.Itoa(i)})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, res.ID)
	}

	// By broadcast id: its create span is there (the file exporter writes
	// each span as it ends; the callback spans may follow a moment later).
	var tr *client.Trace
	waitUntil(t, func() bool {
		var err error
		tr, err = r.GetTrace(ctx, strconv.FormatUint(ids[0], 10))
		return err == nil && tr.Spans >= 2
	})
	if len(tr.TraceIDs) != 1 || tr.ID != strconv.FormatUint(ids[0], 10) || len(tr.Members) != 0 {
		t.Fatalf("trace by broadcast id: %+v", tr)
	}
	st := tracestore.New()
	if err := st.AddJSON(tr.OTLP, "api"); err != nil {
		t.Fatal(err)
	}
	tid, _ := tracestore.ParseTraceID(tr.TraceIDs[0])
	var names []string
	for _, s := range st.Trace(tid) {
		names = append(names, s.Name())
	}
	if !strings.Contains(strings.Join(names, ","), "create broadcast") || !strings.Contains(strings.Join(names, ","), "POST /v1/broadcasts") {
		t.Fatalf("spans of broadcast %d: %v", ids[0], names)
	}
	// By trace id: the same trace.
	byTrace, err := r.GetTrace(ctx, tr.TraceIDs[0])
	if err != nil || byTrace.Spans < tr.Spans || byTrace.TraceIDs[0] != tr.TraceIDs[0] {
		t.Fatalf("by trace id: %+v %v", byTrace, err)
	}

	// Paging: pages of 2, newest first, every trace once.
	all, err := r.ListTraces(ctx, client.TraceFilter{}, client.Page{Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	if len(all.Items) < 5 || all.NextPageToken != "" {
		t.Fatalf("one big page: %d items, next %q", len(all.Items), all.NextPageToken)
	}
	var paged []client.TraceSummary
	tok := ""
	for pages := 0; ; pages++ {
		if pages > 100 {
			t.Fatal("paging does not end")
		}
		p, err := r.ListTraces(ctx, client.TraceFilter{}, client.Page{Limit: 2, Token: tok})
		if err != nil {
			t.Fatal(err)
		}
		if len(p.Items) > 2 {
			t.Fatalf("page of %d with limit 2", len(p.Items))
		}
		paged = append(paged, p.Items...)
		if tok = p.NextPageToken; tok == "" {
			break
		}
	}
	// The reads themselves are untraced; a trace that appeared between
	// the big page and the small ones is newer than all of them and can
	// only add to the first small page: every trace of the big page is on
	// exactly one small page, newest first.
	seen := map[string]bool{}
	for i, s := range paged {
		if seen[s.TraceID] {
			t.Fatalf("trace %s on two pages", s.TraceID)
		}
		seen[s.TraceID] = true
		if i > 0 && s.Start.After(paged[i-1].Start) {
			t.Fatalf("not newest first at %d: %s after %s", i, s.Start, paged[i-1].Start)
		}
	}
	for _, s := range all.Items {
		if !seen[s.TraceID] {
			t.Fatalf("trace %s of the big page is on no small page", s.TraceID)
		}
	}
	// A filter: the broadcast's trace only.
	fp, err := r.ListTraces(ctx, client.TraceFilter{Broadcast: strconv.FormatUint(ids[3], 10)}, client.Page{})
	if err != nil || len(fp.Items) != 1 || fp.Items[0].BroadcastIDs[0] != strconv.FormatUint(ids[3], 10) {
		t.Fatalf("filter by broadcast: %+v %v", fp, err)
	}

	// Unknown ids: 404; a garbled page token: 400.
	for _, id := range []string{"999999", strings.Repeat("ab", 16)} {
		if _, err := r.GetTrace(ctx, id); !client.IsNotFound(err) {
			t.Fatalf("unknown %s: %v", id, err)
		}
	}
	if _, err := r.ListTraces(ctx, client.TraceFilter{}, client.Page{Token: "garbage"}); !client.HasCode(err, "invalid_argument") {
		t.Fatalf("bad page token: %v", err)
	}

	// No token: 401, as every /v1 route.
	for _, path := range []string{"/v1/traces", "/v1/traces/" + tr.TraceIDs[0]} {
		resp, err := http.Get(h.URL() + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized {
			t.Fatalf("%s without a token: %d", path, resp.StatusCode)
		}
	}
}

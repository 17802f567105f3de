package e2e

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hostd-dev/hostd/client"
	"github.com/hostd-dev/hostd/host/tracestore"
	"github.com/hostd-dev/hostd/internal/wasmtest"
)

// traceHang is how long attempt 2 of the flaky plugin hangs in the first
// process: long enough to see its log line and SIGKILL hostd under load.
const traceHang = 6 * time.Second

// traceCLI runs the binary to completion and returns stdout.
func traceCLI(t *testing.T, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var out, errb bytes.Buffer
	cmd := exec.CommandContext(ctx, hostdBin, args...)
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		t.Fatalf("hostd %s: %v\n%s", strings.Join(args, " "), err, errb.String())
	}
	return out.String()
}

// waitLog polls a log file for a line containing s.
func waitLog(t *testing.T, d *daemon, path, s string, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for time.Now().Before(deadline) {
		if b, _ := os.ReadFile(path); bytes.Contains(b, []byte(s)) {
			return
		}
		select {
		case <-d.done:
			b, _ := os.ReadFile(path)
			t.Fatalf("hostd exited before logging %q:\n%s", s, b)
		case <-time.After(20 * time.Millisecond):
		}
	}
	b, _ := os.ReadFile(path)
	t.Fatalf("no %q in the log after %v:\n%s", s, within, b)
}

// spanLabel is a span's name with what the model cares about.
func spanLabel(s *tracestore.Span) string {
	l := s.Name() + " " + strings.ToUpper(strings.TrimPrefix(s.Kind().String(), "SPAN_KIND_"))
	if a, ok := s.Attr(tracestore.AttrAttempt); ok {
		l += " attempt=" + a
	}
	if r, _ := s.Attr(tracestore.AttrRecovered); r == "true" {
		l += " recovered"
	}
	if s.Status().Code().String() == "Error" {
		l += " error"
	}
	var evs []string
	for i := 0; i < s.Events().Len(); i++ {
		ev := s.Events().At(i)
		name := ev.Name()
		if v, ok := ev.Attributes().Get("attempt"); ok {
			name += "(" + v.AsString() + ")"
		}
		evs = append(evs, name)
	}
	if len(evs) > 0 {
		l += " events=" + strings.Join(evs, ",")
	}
	if n := s.Links().Len(); n > 0 {
		l += fmt.Sprintf(" links=%d", n)
	}
	return l
}

// labelTree renders the tree with labels, siblings sorted by their text
// (concurrent sends have no defined start order).
func labelTree(roots []*tracestore.Node) string {
	var walk func(n *tracestore.Node, depth int) string
	walk = func(n *tracestore.Node, depth int) string {
		line := strings.Repeat("  ", depth) + "(parent not exported)\n"
		if n.Span != nil {
			line = strings.Repeat("  ", depth) + spanLabel(n.Span) + "\n"
		}
		var kids []string
		for _, c := range n.Children {
			kids = append(kids, walk(c, depth+1))
		}
		slices.Sort(kids)
		return line + strings.Join(kids, "")
	}
	var out []string
	for _, r := range roots {
		out = append(out, walk(r, 0))
	}
	slices.Sort(out)
	return strings.Join(out, "")
}

// TestTraceAcrossRestart: a broadcast whose plugin callback fails on
// attempts 1 and 2 and succeeds on 3; hostd is SIGKILLed while attempt 2
// runs and restarted. `hostd trace show <broadcast-id> --json`, read from
// the stopped daemon's data directory, holds exactly one trace whose tree
// is request → create → sends + callback attempts 1, 2, 3, the ones after
// the restart marked hostd.recovered and linked to that start's
// hostd.recover root; guest span events are on the attempt spans; each
// send links to the `append round` span that carried it.
func TestTraceAcrossRestart(t *testing.T) {
	dir := t.TempDir()
	plugins := filepath.Join(dir, "plugins")
	if err := os.MkdirAll(plugins, 0o755); err != nil {
		t.Fatal(err)
	}
	wasm, err := os.ReadFile(wasmtest.Build(t, "testdata/flaky"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(plugins, "flaky.wasm"), wasm, 0o644); err != nil {
		t.Fatal(err)
	}
	data := filepath.Join(dir, "data")
	addr := freePort(t)
	cfg := filepath.Join(dir, "hostd.yaml")
	y := fmt.Sprintf("api:\n  listen: %s\ndata:\n  dir: %s\nbroadcast:\n  vchannels: [orders/0]\nplugins:\n  dir: %s\n  call_timeout: 30s\n",
		addr, data, plugins)
	if err := os.WriteFile(cfg, []byte(y), 0o644); err != nil {
		t.Fatal(err)
	}
	logPath := filepath.Join(dir, "hostd.log")
	c, err := client.New("http://" + addr)
	if err != nil {
		t.Fatal(err)
	}

	d := startReady(t, c, cfg, addr, logPath)
	hangUntil := time.Now().Add(traceHang)
	res, err := c.SubmitBroadcast(context.Background(), &client.BroadcastRequest{
		Type: "Flaky", VChannels: []string{"orders/0"}, Wait: "persisted", PayloadText: "x",
		Properties: map[string]string{"hang_until_unix_ms": strconv.FormatInt(hangUntil.UnixMilli(), 10)},
	})
	if err != nil {
		b, _ := os.ReadFile(logPath)
		t.Fatalf("submit: %v\n%s", err, b)
	}
	bid := strconv.FormatUint(res.ID, 10)
	waitLog(t, d, logPath, "flaky: attempt 2 hanging", traceHang-time.Second)
	d.kill() // SIGKILL while attempt 2 is in flight

	time.Sleep(time.Until(hangUntil)) // after restart, attempt 2 fails at once
	d2 := startReady(t, c, cfg, addr, logPath)
	deadline := time.Now().Add(30 * time.Second)
	for {
		task, err := c.GetBroadcast(context.Background(), res.ID)
		if err == nil && task.State == "TOMBSTONE" {
			if task.Attempts != 3 {
				t.Fatalf("task finished after %d attempts, want 3", task.Attempts)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("broadcast %s not done: %+v %v", bid, task, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	d2.stop(t)

	// Read back from the stopped daemon's data directory.
	out := traceCLI(t, "trace", "show", bid, "--json", "--data-dir", data)
	st := tracestore.New()
	if err := st.Add(strings.NewReader(out), "show --json"); err != nil {
		t.Fatal(err)
	}
	ids := st.TraceIDs()
	if len(ids) != 1 || st.Stats().Corrupt+st.Stats().Torn != 0 {
		t.Fatalf("show --json: %d traces (want exactly 1), stats %+v\n%s", len(ids), st.Stats(), out)
	}
	got := labelTree(tracestore.BuildTree(st.Trace(ids[0])))
	want := `POST /v1/broadcasts SERVER
  create broadcast PRODUCER
    process broadcast CONSUMER attempt=1 error events=flaky.attempt(1),exception
      plugin.ack INTERNAL error events=exception
    process broadcast CONSUMER attempt=2 recovered error events=flaky.attempt(2),exception links=1
      plugin.ack INTERNAL error events=exception
    process broadcast CONSUMER attempt=3 recovered events=flaky.attempt(3) links=1
      plugin.ack INTERNAL
    send _control/0 CLIENT attempt=1 links=1
    send orders/0 CLIENT attempt=1 links=1
`
	if got != want {
		t.Fatalf("trace tree of broadcast %s:\n%s\nwant:\n%s", bid, got, want)
	}

	// The links point at the second start's hostd.recover root (another
	// trace, in the same files), which links back to the create span.
	all, err := tracestore.LoadDataDir(data)
	if err != nil {
		t.Fatal(err)
	}
	var create *tracestore.Span
	for _, s := range all.Trace(ids[0]) {
		if s.Name() == "create broadcast" {
			create = s
		}
	}
	for _, s := range all.Trace(ids[0]) {
		if strings.HasPrefix(s.Name(), "send ") {
			l := s.Links().At(0)
			if round, ok := all.Span(l.TraceID(), l.SpanID()); !ok || round.Name() != "append round" {
				t.Fatalf("%s links to %s/%s, not to an append round span", s.Name(), l.TraceID(), l.SpanID())
			}
			continue
		}
		if s.Name() != "process broadcast" || s.Links().Len() == 0 {
			continue
		}
		l := s.Links().At(0)
		rec, ok := all.Span(l.TraceID(), l.SpanID())
		if !ok || rec.Name() != "hostd.recover" || l.TraceID() == s.TraceID() {
			t.Fatalf("attempt link %s/%s does not reach a hostd.recover root of another trace", l.TraceID(), l.SpanID())
		}
		if rec.Links().Len() != 1 || rec.Links().At(0).SpanID() != create.SpanID() {
			t.Fatalf("hostd.recover does not link back to the create span")
		}
		if !rec.ParentSpanID().IsEmpty() {
			t.Fatal("hostd.recover is not a root")
		}
	}
	// Two starts, two instance ids.
	inst := map[string]bool{}
	for _, s := range all.Trace(ids[0]) {
		v, _ := s.Resource.Attributes().Get("service.instance.id")
		inst[v.AsString()] = true
	}
	if len(inst) != 2 {
		t.Fatalf("instance ids %v, want one per start", inst)
	}

	if path := os.Getenv("HOSTD_E2E_CAPTURE"); path != "" {
		text := traceCLI(t, "trace", "show", bid, "--data-dir", data)
		ls := traceCLI(t, "trace", "ls", "--data-dir", data)
		if err := os.WriteFile(path, []byte("$ hostd trace show "+bid+"\n"+text+"\n$ hostd trace ls\n"+ls), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// TestTraceparentJoinsCallerTrace: a W3C traceparent on the API request
// makes the whole broadcast part of the caller's trace, and `hostd trace
// show <caller's trace id>` finds it with the caller's span marked as not
// exported.
func TestTraceparentJoinsCallerTrace(t *testing.T) {
	dir := t.TempDir()
	addr := freePort(t)
	cfg := writeConfig(t, dir, addr, []string{"orders/0"})
	logPath := filepath.Join(dir, "hostd.log")
	c, err := client.New("http://" + addr)
	if err != nil {
		t.Fatal(err)
	}
	d := startReady(t, c, cfg, addr, logPath)
	const tid, parent = "0af7651916cd43dd8448eb211c80319c", "b7ad6b7169203331"
	req, _ := http.NewRequest("POST", "http://"+addr+"/v1/broadcasts",
		strings.NewReader(`{"type":"noop","vchannels":["orders/0"],"payload_text":"x"}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("traceparent", "00-"+tid+"-"+parent+"-01")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(string(body), `"TOMBSTONE"`) {
		t.Fatalf("broadcast: %d %s", resp.StatusCode, body)
	}
	d.stop(t)

	data := filepath.Join(dir, "data")
	out := traceCLI(t, "trace", "show", tid, "--compact", "--width", "0", "--data-dir", data)
	for _, want := range []string{"trace " + tid, "(parent not exported) span " + parent,
		"POST /v1/broadcasts  SERVER  (remote parent)", "create broadcast  PRODUCER", "send orders/0  CLIENT  attempt=1",
		"send _control/0  CLIENT  attempt=1", "process broadcast  CONSUMER  attempt=1"} {
		if !strings.Contains(out, want) {
			t.Errorf("trace show lacks %q:\n%s", want, out)
		}
	}
}

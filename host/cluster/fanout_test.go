package cluster

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/hostd-dev/hostd/client"
	"github.com/hostd-dev/hostd/host"
	"github.com/hostd-dev/hostd/host/tracestore"
	"github.com/hostd-dev/hostd/internal/etcdtest"
	"github.com/hostd-dev/hostd/internal/wasmtest"
	"github.com/hostd-dev/hostd/wire"
)

// Requests that reach every member, on three replicas of one etcd plus
// two members that are registered but do not answer (one refuses
// connections, as a killed process before its session expires; one
// accepts and never answers, as a SIGSTOPped one):
//
//   - a broadcast submitted through a follower has spans on that follower
//     ("forward to leader") and on the leader; GET /v1/traces/{id} through
//     the third replica, by broadcast id and by trace id, returns them
//     merged into one trace, each span once (also when a replica holds a
//     copy of another's file), and names the two silent members as
//     missing instead of failing; the list shows the trace too;
//   - plugin reload through a follower reaches every member: each reports
//     the new file's hash, GET /v1/cluster shows it for all at once, the
//     leader runs the new version, the silent members are unreachable.
func TestFanOutTracesAndPluginReload(t *testing.T) {
	etcd := etcdtest.Start(t, etcdtest.Options{})
	echo := wasmtest.Build(t, "../../runtime/wasm/testdata/echo")
	echo2 := wasmtest.Build(t, "../../runtime/wasm/testdata/echo2")
	// Both versions are compiled into the shared cache first: cold
	// compiles by three replicas at once under -race could outlast the
	// election wait and the fan-out's deadline.
	for _, p := range []string{echo, echo2} {
		warm := replicaConfig(t, nil, "warm", "/warm/")
		warm.Plugins.Dir = t.TempDir()
		copyFile(t, p, filepath.Join(warm.Plugins.Dir, "echo.wasm"))
		if err := os.Symlink(wasmtest.CacheDir(), filepath.Join(warm.Data.Dir, "wasm-cache")); err != nil {
			t.Fatal(err)
		}
		if err := host.PrecompilePlugins(context.Background(), warm, nil); err != nil {
			t.Fatal(err)
		}
	}
	pdir := t.TempDir()
	copyFile(t, echo, filepath.Join(pdir, "echo.wasm"))
	var rs []*replica
	for i := range 3 {
		cfg := replicaConfig(t, etcd.Endpoints(), "f"+strconv.Itoa(i), "/fan/")
		cfg.Plugins.Dir = pdir
		// The hung member costs every fan-out 3/4 of this.
		cfg.API.RequestTimeout = 8 * time.Second
		// Share the test binary's compilation cache (a cold compile is
		// seconds under -race).
		if err := os.Symlink(wasmtest.CacheDir(), filepath.Join(cfg.Data.Dir, "wasm-cache")); err != nil {
			t.Fatal(err)
		}
		rs = append(rs, startReplica(t, cfg))
	}
	t.Cleanup(func() {
		if t.Failed() {
			for _, r := range rs {
				t.Logf("%s not ready: %v\n%s", r.Name(), r.notReady(), r.logs.String())
			}
		}
	})
	leader, _ := waitLeader(t, rs)
	var fs []*replica
	for _, r := range rs {
		if r != leader {
			fs = append(fs, r)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	// The silent members, registered as replicas register.
	cli := etcd.Client(t)
	leases := map[string]clientv3.LeaseID{}
	hung, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer hung.Close()
	go func() { // accept and never answer
		var conns []net.Conn
		defer func() {
			for _, c := range conns {
				c.Close()
			}
		}()
		for {
			c, err := hung.Accept()
			if err != nil {
				return
			}
			conns = append(conns, c)
		}
	}()
	for name, addr := range map[string]string{"ghost-dead": "http://127.0.0.1:1", "ghost-hung": "http://" + hung.Addr().String()} {
		lease, err := cli.Grant(ctx, 300)
		if err != nil {
			t.Fatal(err)
		}
		leases[name] = lease.ID
		rec, _ := json.Marshal(wire.ClusterMember{Name: name, Address: addr, Version: "x", Plugins: map[string]string{}, Since: time.Now()})
		if _, err := cli.Put(ctx, "/fan.cluster/members/"+name, string(rec), clientv3.WithLease(lease.ID)); err != nil {
			t.Fatal(err)
		}
	}
	silent := []string{"ghost-dead", "ghost-hung"}

	// A broadcast through follower 0.
	res, err := clientOf(t, fs[0]).SubmitBroadcast(ctx, &client.BroadcastRequest{Type: "noop", PayloadText: "traced"})
	if err != nil {
		t.Fatal(err)
	}
	bid := strconv.FormatUint(res.ID, 10)
	third := clientOf(t, fs[1])
	var tr *client.Trace
	waitFor(t, "the broadcast's spans of both replicas, merged", func() bool {
		tr, err = third.GetTrace(ctx, bid)
		if err != nil {
			t.Logf("get trace: %v", err)
			return false
		}
		names := spanNames(t, tr)
		return slices.Contains(names, "forward to leader") && slices.Contains(names, "create broadcast")
	})
	if len(tr.TraceIDs) != 1 || !slices.Equal(tr.Missing, silent) {
		t.Fatalf("merged trace: ids %v missing %v", tr.TraceIDs, tr.Missing)
	}
	outcomes := map[string]string{}
	for _, m := range tr.Members {
		outcomes[m.Name] = m.Outcome
	}
	want := map[string]string{"ghost-dead": "unreachable", "ghost-hung": "unreachable"}
	for _, r := range rs {
		want[r.Name()] = "ok"
	}
	if len(outcomes) != len(want) {
		t.Fatalf("members %+v, want %v", tr.Members, want)
	}
	for k, v := range want {
		if outcomes[k] != v {
			t.Fatalf("member %s: %q, want %q (%+v)", k, outcomes[k], v, tr.Members)
		}
	}
	byTrace, err := clientOf(t, leader).GetTrace(ctx, tr.TraceIDs[0])
	if err != nil || !slices.Contains(spanNames(t, byTrace), "forward to leader") {
		t.Fatalf("by trace id via the leader: %v %v", err, byTrace)
	}

	// A replica holding a copy of another's span file: every span still
	// once.
	copyFile(t, filepath.Join(leader.cfg.Data.Dir, "traces", "spans.jsonl"), filepath.Join(fs[1].cfg.Data.Dir, "traces", "copy.jsonl"))
	again, err := third.GetTrace(ctx, tr.TraceIDs[0])
	if err != nil {
		t.Fatal(err)
	}
	if n := len(spanNames(t, again)); n != again.Spans || n < tr.Spans {
		t.Fatalf("after the copy: %d spans in otlp, spans=%d, before %d", n, again.Spans, tr.Spans)
	}

	// The list through any replica has the merged trace.
	page, err := clientOf(t, fs[0]).ListTraces(ctx, client.TraceFilter{Broadcast: bid}, client.Page{})
	if err != nil || len(page.Items) != 1 || page.Items[0].TraceID != tr.TraceIDs[0] || !slices.Equal(page.Missing, silent) {
		t.Fatalf("list: %+v %v", page, err)
	}
	if page.Items[0].Spans < 2 {
		t.Fatalf("list item: %+v (the spans of both replicas add up)", page.Items[0])
	}
	if _, err := third.GetTrace(ctx, "123456789"); !client.IsNotFound(err) {
		t.Fatalf("unknown broadcast id: %v", err)
	}

	// Plugin reload through a follower reaches every member. (The hung
	// member goes first: a reload waits for each member up to 3/4 of
	// plugins.init_timeout, for compiles.)
	if _, err := cli.Revoke(ctx, leases["ghost-hung"]); err != nil {
		t.Fatal(err)
	}
	silent = silent[:1]
	copyFile(t, echo2, filepath.Join(pdir, "echo.wasm"))
	newHash := fileSHA(t, echo2)
	rl, err := clientOf(t, fs[1]).ReloadPlugins(ctx)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]wire.PluginReloadMember{}
	for _, m := range rl.Members {
		got[m.Name] = m
	}
	for _, r := range rs {
		m := got[r.Name()]
		if m.Outcome != "ok" || m.Plugins["echo"] != newHash || m.Leader != (r == leader) {
			t.Fatalf("reload on %s: %+v (want ok, echo=%s)", r.Name(), m, newHash[:12])
		}
	}
	for _, g := range silent {
		if got[g].Outcome != "unreachable" {
			t.Fatalf("reload on %s: %+v", g, got[g])
		}
	}
	if len(rl.Items) != 1 || rl.Items[0].SHA256 != newHash {
		t.Fatalf("the leader's runtime after the reload: %+v", rl.Items)
	}
	st, err := clientOf(t, fs[0]).Cluster(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range st.Members {
		if !slices.Contains(silent, m.Name) && m.Plugins["echo"] != newHash {
			t.Fatalf("/v1/cluster right after the reload: %s has echo=%s, want %s", m.Name, m.Plugins["echo"], newHash)
		}
	}
	pl, err := clientOf(t, fs[0]).ListPlugins(ctx, client.Page{})
	if err != nil || len(pl.Items) != 1 || pl.Items[0].SHA256 != newHash {
		t.Fatalf("plugins served by the leader: %+v %v", pl, err)
	}
}

func spanNames(t *testing.T, tr *client.Trace) []string {
	t.Helper()
	st := tracestore.New()
	if err := st.AddJSON(tr.OTLP, "answer"); err != nil {
		t.Fatal(err)
	}
	var names []string
	td := st.OTLP()
	for i := 0; i < td.ResourceSpans().Len(); i++ {
		ss := td.ResourceSpans().At(i).ScopeSpans()
		for j := 0; j < ss.Len(); j++ {
			for k := 0; k < ss.At(j).Spans().Len(); k++ {
				names = append(names, ss.At(j).Spans().At(k).Name())
			}
		}
	}
	if d := st.Stats().Duplicates; d > 0 {
		t.Fatalf("the answer holds %d spans twice", d)
	}
	return names
}

func copyFile(t *testing.T, src, dst string) {
	t.Helper()
	b, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dst+".tmp", b, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(dst+".tmp", dst); err != nil {
		t.Fatal(err)
	}
}

func fileSHA(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

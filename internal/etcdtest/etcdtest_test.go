package etcdtest

import (
	"context"
	"net"
	"net/url"
	"testing"
	"time"

	"github.com/hostd-dev/hostd/internal/testport"
)

// TestStartPutGet starts one member, writes and reads a key, then stops
// and restarts the member and reads the key again from its data dir.
func TestStartPutGet(t *testing.T) {
	c := Start(t, Options{})
	cli := c.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := cli.Put(ctx, "k", "v"); err != nil {
		t.Fatal(err)
	}
	c.Stop(0)
	c.Restart(0)
	resp, err := cli.Get(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Kvs) != 1 || string(resp.Kvs[0].Value) != "v" {
		t.Fatalf("got %v, want k=v", resp.Kvs)
	}
}

// A start that loses its port to another process must be recognised as
// such, or Start would fail instead of trying fresh ports (CI once did).
func TestTakenPortIsRecognised(t *testing.T) {
	l, err := net.Listen("tcp", testport.Addr(t))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	c := &Cluster{t: t, opts: Options{HeartbeatMS: 100, ElectionMS: 1000}}
	m := &member{name: "m0", dir: t.TempDir() + "/m0"}
	m.clientURL = url.URL{Scheme: "http", Host: l.Addr().String()}
	m.peerURL = url.URL{Scheme: "http", Host: testport.Addr(t)}
	m.initialCfg = "m0=" + m.peerURL.String()
	err = c.startMember(m, "new")
	if err == nil {
		c.StopAll()
		t.Fatal("member started on a taken client port")
	}
	if !testport.IsAddrInUse(err) {
		t.Fatalf("IsAddrInUse(%v) = false: Start would not retry", err)
	}
}

package etcdtest

import (
	"context"
	"testing"
	"time"
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

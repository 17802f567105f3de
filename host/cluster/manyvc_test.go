package cluster

import (
	"context"
	"fmt"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/hostd-dev/hostd/client"
	"github.com/hostd-dev/hostd/internal/etcdtest"
)

// Counts on etcd (hard part 7): a broadcast to as many vchannels as the
// engine allows on etcd completes (its appends are split into commits
// that fit --max-txn-ops); one to more is refused at submit, before
// anything is persisted — never a task stuck retrying a commit that can
// never fit.
func TestVChannelCountsOnEtcd(t *testing.T) {
	etcd := etcdtest.Start(t, etcdtest.Options{})
	cfg := replicaConfig(t, etcd.Endpoints(), "v0", "/vc/")
	for i := range 300 {
		cfg.Broadcast.Vchannels = append(cfg.Broadcast.Vchannels, fmt.Sprintf("t%d/0", i))
	}
	r := startReplica(t, cfg)
	waitLeader(t, []*replica{r})
	c := clientOf(t, r)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, err := c.SubmitBroadcast(ctx, &client.BroadcastRequest{Type: "noop", PayloadText: "x", VChannels: cfg.Broadcast.Vchannels})
	m := regexp.MustCompile(`max (\d+)`).FindStringSubmatch(fmt.Sprint(err))
	if !client.HasCode(err, "invalid_argument") || m == nil {
		t.Fatalf("300 vchannels on etcd: %v, want invalid_argument naming the max", err)
	}
	max, _ := strconv.Atoi(m[1])
	if max < 16 || max >= 300 {
		t.Fatalf("max %d vchannels on etcd: want a bound that fits --max-txn-ops 128", max)
	}
	res, err := c.SubmitBroadcast(ctx, &client.BroadcastRequest{Type: "noop", PayloadText: "x", VChannels: cfg.Broadcast.Vchannels[:max]})
	if err != nil || res.State != "TOMBSTONE" {
		t.Fatalf("%d vchannels on etcd: %+v %v", max, res, err)
	}
}

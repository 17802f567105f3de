package etcdcat

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/hostd-dev/hostd/internal/etcdtest"
	"github.com/hostd-dev/hostd/runtime/catalog"
)

// TestSmallServerLimits runs against an etcd started with
// --max-txn-ops 8 and --max-request-bytes 128 KiB: rounds split to fit,
// batches that can never fit are refused before anything is written, and
// Open refuses options above the server's limits.
func TestSmallServerLimits(t *testing.T) {
	ctx := context.Background()
	c := etcdtest.Start(t, etcdtest.Options{MaxTxnOps: 8, MaxRequestBytes: 128 << 10})
	cli := c.Client(t)
	small := func(o *Options) {
		o.MaxTxnOps = 8
		o.MaxRequestBytes = 128 << 10
		o.MaxValueSize = 32 << 10
	}

	t.Run("OpenRefusesLargerOptions", func(t *testing.T) {
		_, err := Open(ctx, Options{Client: cli, Prefix: "/o1/"})
		if err == nil || !strings.Contains(err.Error(), "max-txn-ops") {
			t.Fatalf("default max_txn_ops against a server of 8: %v", err)
		}
		_, err = Open(ctx, Options{Client: cli, Prefix: "/o2/", MaxTxnOps: 8, MaxValueSize: 32 << 10})
		if err == nil || !strings.Contains(err.Error(), "max-request-bytes") {
			t.Fatalf("default max_request_bytes against a server of 128 KiB: %v", err)
		}
	})

	t.Run("BatchNeverFits", func(t *testing.T) {
		s := openOn(t, cli, small)
		var ops []catalog.Op
		for i := 0; i < 8; i++ {
			ops = append(ops, put(fmt.Sprintf("n/%d", i), "v"))
		}
		_, err := s.Commit(ctx, &catalog.Batch{Ops: ops})
		if !errors.Is(err, catalog.ErrTooLarge) || !strings.Contains(err.Error(), "max_txn_ops 8") {
			t.Fatalf("8 ops: %v", err)
		}
		// 7 entries fit, also on a fenced store (the fence has its slot).
		if _, err := s.Commit(ctx, &catalog.Batch{Ops: ops[:7]}); err != nil {
			t.Fatalf("7 ops: %v", err)
		}
		elect := s.Prefix() + "leader"
		term := campaign(t, cli, elect, "a")
		fs := s.WithFence(Fence{Key: elect, Revision: term})
		defer fs.Close()
		if _, err := fs.Commit(ctx, &catalog.Batch{Checks: []catalog.Check{{Key: []byte("n/0"), Version: 0}}, Ops: ops[:6]}); !errors.Is(err, catalog.ErrConflict) {
			t.Fatalf("fenced 7 entries with a stale check: %v", err)
		}
		var big []catalog.Op
		for i := 0; i < 5; i++ {
			big = append(big, catalog.Op{Key: []byte(fmt.Sprintf("big/%d", i)), Value: make([]byte, 30<<10)})
		}
		_, err = s.Commit(ctx, &catalog.Batch{Ops: big})
		if !errors.Is(err, catalog.ErrTooLarge) || !strings.Contains(err.Error(), "max-request-bytes") {
			t.Fatalf("150 KiB batch: %v", err)
		}
		if _, _, err := getKey(t, s, "big/0"); !errors.Is(err, catalog.ErrNotFound) {
			t.Fatalf("refused batch was written: %v", err)
		}
		// Deletes bump range generations: a deep delete costs more entries.
		if _, err := s.Commit(ctx, &catalog.Batch{Ops: []catalog.Op{{Key: []byte("a/b/c/d/e/f"), Delete: true}}}); err != nil {
			t.Fatalf("deep delete: %v", err)
		}
	})

	t.Run("RoundSplitsByOpsAndBytes", func(t *testing.T) {
		s := openOn(t, cli, small)
		queueN, release := hold(t, s)
		before := s.Stats()
		const writers = 20
		var wg sync.WaitGroup
		errs := make([]error, writers)
		for i := 0; i < writers; i++ {
			b := &catalog.Batch{}
			switch i % 3 {
			case 0: // 3 ops
				for j := 0; j < 3; j++ {
					b.Ops = append(b.Ops, put(fmt.Sprintf("s/%02d/%d", i, j), "v"))
				}
			case 1: // one large value
				b.Ops = []catalog.Op{{Key: []byte(fmt.Sprintf("s/%02d/0", i)), Value: make([]byte, 30<<10)}}
			case 2: // checks and a range check count too
				b.Checks = []catalog.Check{{Key: []byte(fmt.Sprintf("s/%02d/0", i)), Version: 0}}
				b.RangeChecks = []catalog.RangeCheck{{Start: []byte(fmt.Sprintf("s/%02d/", i)), End: []byte(fmt.Sprintf("s/%02d0", i))}}
				b.Ops = []catalog.Op{put(fmt.Sprintf("s/%02d/0", i), "v")}
			}
			wg.Add(1)
			go func() { defer wg.Done(); _, errs[i] = s.Commit(ctx, b) }()
			queueN(i + 1)
		}
		release()
		wg.Wait()
		for i, err := range errs {
			if err != nil {
				t.Fatalf("writer %d: %v", i, err)
			}
		}
		st := s.Stats()
		if st.Rounds-before.Rounds != 2 || st.Txns-before.Txns < 6 {
			t.Fatalf("stats before %+v after %+v: want 2 rounds, the second split into many txns", before, st)
		}
		n := 0
		s.View(ctx, func(r catalog.Reader) error {
			return r.Scan([]byte("s/"), []byte("s0"), func(catalog.KV) error { n++; return nil })
		})
		if want := 7*3 + 13; n != want {
			t.Fatalf("%d records, want %d", n, want)
		}
	})
}

// hold pauses the committer's next round (as catalogtest does).
func hold(t *testing.T, s *Store) (queueN func(int), release func()) {
	gate, held := make(chan struct{}), make(chan struct{})
	var once, rel sync.Once
	s.SetRoundHook(func(int) { once.Do(func() { close(held); <-gate }) })
	go s.Commit(context.Background(), &catalog.Batch{Ops: []catalog.Op{put("hold", "x")}})
	<-held
	release = func() { rel.Do(func() { close(gate) }) }
	t.Cleanup(release)
	return func(n int) {
		for s.Queued() != n {
			runtimeGosched()
		}
	}, release
}

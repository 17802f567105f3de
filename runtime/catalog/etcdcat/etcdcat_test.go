package etcdcat

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/hostd-dev/hostd/internal/etcdtest"
	"github.com/hostd-dev/hostd/runtime/catalog"
	"github.com/hostd-dev/hostd/runtime/catalog/catalogtest"
)

// Each top-level test starts one etcd and gives every store a prefix of
// its own, so the package needs three etcd starts in all.

var prefixN atomic.Int64

func openOn(t *testing.T, cli *clientv3.Client, mut ...func(*Options)) *Store {
	t.Helper()
	o := Options{Client: cli, Prefix: fmt.Sprintf("/t%d/", prefixN.Add(1))}
	for _, f := range mut {
		f(&o)
	}
	s, err := Open(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func put(k, v string) catalog.Op { return catalog.Op{Key: []byte(k), Value: []byte(v)} }

func TestConformance(t *testing.T) {
	c := etcdtest.Start(t, etcdtest.Options{})
	cli := c.Client(t)
	catalogtest.Run(t, func(t *testing.T) catalog.Store { return openOn(t, cli) })
	// A sequence block of 3: nearly every allocation reserves, so the
	// reservation txns race each other under the hammer.
	t.Run("HammerSmallSequenceBlock", func(t *testing.T) {
		catalogtest.HammerMixed(t, openOn(t, cli, func(o *Options) { o.SequenceBlock = 3 }))
	})
}

func getKey(t *testing.T, s catalog.Store, key string) ([]byte, catalog.Version, error) {
	t.Helper()
	var (
		v   []byte
		ver catalog.Version
	)
	err := s.View(context.Background(), func(r catalog.Reader) error {
		var err error
		v, ver, err = r.Get([]byte(key))
		return err
	})
	return v, ver, err
}

// TestEtcd holds the etcd-only cases that run on default server limits.
func TestEtcd(t *testing.T) {
	c := etcdtest.Start(t, etcdtest.Options{})
	cli := c.Client(t)
	t.Run("Fence", func(t *testing.T) { testFence(t, cli) })
	t.Run("FencedRoundFailsTogether", func(t *testing.T) { testFencedRound(t, cli) })
	t.Run("SequencesAcrossReopenAndStores", func(t *testing.T) { testSequencesAcross(t, cli) })
	t.Run("Compacted", func(t *testing.T) { testCompacted(t, cli) })
	t.Run("OpenChecks", func(t *testing.T) { testOpenChecks(t, cli) })
	t.Run("BackupRestore", func(t *testing.T) { testBackupRestore(t, cli) })
	t.Run("BadgerToEtcd", func(t *testing.T) { testBadgerToEtcd(t, cli) })
	t.Run("Telemetry", func(t *testing.T) { testTelemetry(t, cli) })
	t.Run("OutsideRaces", func(t *testing.T) { testOutsideRaces(t, cli) })
	t.Run("ScanStreamAndPaged", func(t *testing.T) { testScanStreamAndPaged(t, cli) })
}

// campaign puts an election-like key and returns its create revision
// (the term).
func campaign(t *testing.T, cli *clientv3.Client, key, who string) int64 {
	t.Helper()
	ctx := context.Background()
	if _, err := cli.Delete(ctx, key); err != nil {
		t.Fatal(err)
	}
	resp, err := cli.Put(ctx, key, who)
	if err != nil {
		t.Fatal(err)
	}
	return resp.Header.Revision
}

func testFence(t *testing.T, cli *clientv3.Client) {
	ctx := context.Background()
	base := openOn(t, cli)
	elect := base.Prefix() + "election/leader"
	term1 := campaign(t, cli, elect, "a")
	var fenced1 atomic.Int32
	s1 := base.WithFence(Fence{Key: elect, Revision: term1, OnFenced: func() { fenced1.Add(1) }})
	defer s1.Close()
	v1, err := s1.Commit(ctx, &catalog.Batch{Ops: []catalog.Op{put("lk/a", "1")}})
	if err != nil {
		t.Fatal(err)
	}
	seq1, err := s1.NextSequence(ctx, "ids", 3)
	if err != nil {
		t.Fatal(err)
	}
	// A failed version check under a live term is a conflict, not a fence.
	_, err = s1.Commit(ctx, &catalog.Batch{Checks: []catalog.Check{{Key: []byte("lk/a"), Version: v1 + 7}}, Ops: []catalog.Op{put("lk/b", "x")}})
	if !errors.Is(err, catalog.ErrConflict) || errors.Is(err, catalog.ErrFenced) || fenced1.Load() != 0 {
		t.Fatalf("stale check under a live term: %v (fenced %d)", err, fenced1.Load())
	}
	// A new term begins (the old leader paused, lost its key, someone else
	// won): the first store is fenced, once.
	term2 := campaign(t, cli, elect, "b")
	var fenced2 atomic.Int32
	s2 := base.WithFence(Fence{Key: elect, Revision: term2, OnFenced: func() { fenced2.Add(1) }})
	defer s2.Close()
	_, err = s1.Commit(ctx, &catalog.Batch{Checks: []catalog.Check{{Key: []byte("lk/a"), Version: v1}}, Ops: []catalog.Op{put("lk/a", "old-leader")}})
	if !errors.Is(err, catalog.ErrFenced) || errors.Is(err, catalog.ErrConflict) {
		t.Fatalf("old term commit: %v, want ErrFenced", err)
	}
	if !strings.Contains(err.Error(), elect) {
		t.Fatalf("fence error %q does not name the election key", err)
	}
	for i := 0; i < 3; i++ {
		if _, err := s1.Commit(ctx, &catalog.Batch{Ops: []catalog.Op{put("lk/c", "x")}}); !errors.Is(err, catalog.ErrFenced) {
			t.Fatalf("later commit on a fenced store: %v", err)
		}
	}
	if _, err := s1.NextSequence(ctx, "ids", 1); !errors.Is(err, catalog.ErrFenced) {
		t.Fatalf("reservation on a fenced store: %v", err)
	}
	if n := fenced1.Load(); n != 1 {
		t.Fatalf("OnFenced called %d times, want 1", n)
	}
	if v, _, _ := getKey(t, base, "lk/a"); string(v) != "1" {
		t.Fatalf("lk/a = %q: the old term wrote", v)
	}
	if _, _, err := getKey(t, base, "lk/c"); !errors.Is(err, catalog.ErrNotFound) {
		t.Fatalf("lk/c: %v", err)
	}
	// The new term works, and its sequence block is fresh.
	if _, err := s2.Commit(ctx, &catalog.Batch{Checks: []catalog.Check{{Key: []byte("lk/a"), Version: v1}}, Ops: []catalog.Op{put("lk/a", "2")}}); err != nil {
		t.Fatal(err)
	}
	seq2, err := s2.NextSequence(ctx, "ids", 1)
	if err != nil || seq2 <= seq1+2 {
		t.Fatalf("new term's sequence %d %v, want > %d", seq2, err, seq1+2)
	}
	// A store whose term never was current: fenced even when its batch
	// also has a stale check (the fence wins, the caller steps down).
	var fenced3 atomic.Int32
	s3 := base.WithFence(Fence{Key: elect, Revision: term1, OnFenced: func() { fenced3.Add(1) }})
	_, err = s3.Commit(ctx, &catalog.Batch{Checks: []catalog.Check{{Key: []byte("lk/a"), Version: 1}}, Ops: []catalog.Op{put("lk/d", "x")}})
	if !errors.Is(err, catalog.ErrFenced) || fenced3.Load() != 1 {
		t.Fatalf("stale term with a stale check: %v (fenced %d)", err, fenced3.Load())
	}
	// A fenced store whose key is gone (lease expired) is fenced too.
	cli.Delete(ctx, elect)
	if _, err := s2.Commit(ctx, &catalog.Batch{Ops: []catalog.Op{put("lk/e", "x")}}); !errors.Is(err, catalog.ErrFenced) || fenced2.Load() != 1 {
		t.Fatalf("term key deleted: %v (fenced %d)", err, fenced2.Load())
	}
	// Closing fenced stores leaves the client and the base store working.
	s1.Close()
	s2.Close()
	s3.Close()
	if _, err := base.Commit(ctx, &catalog.Batch{Ops: []catalog.Op{put("lk/f", "x")}}); err != nil {
		t.Fatalf("base store after closing fenced stores: %v", err)
	}
	if _, err := cli.Get(ctx, "x"); err != nil {
		t.Fatalf("client after closing fenced stores: %v", err)
	}
}

// testFencedRound: every writer of a round on a fenced store gets
// ErrFenced; OnFenced runs once; nothing is written.
func testFencedRound(t *testing.T, cli *clientv3.Client) {
	ctx := context.Background()
	base := openOn(t, cli)
	elect := base.Prefix() + "election/leader"
	term := campaign(t, cli, elect, "a")
	var calls atomic.Int32
	s := base.WithFence(Fence{Key: elect, Revision: term, OnFenced: func() { calls.Add(1) }})
	defer s.Close()
	campaign(t, cli, elect, "b")
	var wg sync.WaitGroup
	errs := make([]error, 20)
	for i := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errs[i] = s.Commit(ctx, &catalog.Batch{Ops: []catalog.Op{put(fmt.Sprintf("f/%d", i), "x")}})
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if !errors.Is(err, catalog.ErrFenced) {
			t.Fatalf("writer %d: %v", i, err)
		}
	}
	if calls.Load() != 1 {
		t.Fatalf("OnFenced called %d times", calls.Load())
	}
	n := 0
	base.View(ctx, func(r catalog.Reader) error {
		return r.Scan([]byte("f/"), []byte("f0"), func(catalog.KV) error { n++; return nil })
	})
	if n != 0 {
		t.Fatalf("%d records written by a fenced store", n)
	}
}

// testSequencesAcross: values are never handed out twice across reopen
// and between stores on one prefix reserving concurrently.
func testSequencesAcross(t *testing.T, cli *clientv3.Client) {
	ctx := context.Background()
	prefix := fmt.Sprintf("/seq%d/", prefixN.Add(1))
	o := Options{Client: cli, Prefix: prefix, SequenceBlock: 10}
	s1, err := Open(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	a, _ := s1.NextSequence(ctx, "ids", 1)
	b, _ := s1.NextSequence(ctx, "ids", 4)
	s1.Close()
	if _, err := s1.NextSequence(ctx, "ids", 1); !errors.Is(err, catalog.ErrClosed) {
		t.Fatalf("after close: %v", err)
	}
	s2, err := Open(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	c, _ := s2.NextSequence(ctx, "ids", 1)
	if a != 1 || b != 2 || c <= b+3 {
		t.Fatalf("got %d %d, then %d after reopen", a, b, c)
	}
	// Two stores (as two terms would) reserving concurrently.
	s3, err := Open(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	defer s3.Close()
	var mu sync.Mutex
	seen := map[uint64]bool{c: true}
	var wg sync.WaitGroup
	errc := make(chan error, 8)
	for _, s := range []*Store{s2, s3, s2, s3} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 40; i++ {
				v, err := s.NextSequence(ctx, "ids", 3)
				if err != nil {
					errc <- err
					return
				}
				mu.Lock()
				for x := v; x < v+3; x++ {
					if seen[x] || x <= b+3 {
						errc <- fmt.Errorf("value %d handed out twice", x)
					}
					seen[x] = true
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Fatal(err)
	}
	// The durable limit is above every value handed out.
	resp, err := cli.Get(ctx, prefix+"k/"+string(catalog.SequenceKey("ids")))
	if err != nil || len(resp.Kvs) != 1 {
		t.Fatalf("sequence record: %v", err)
	}
	limit, err := catalog.DecodeSequence(catalog.SequenceKey("ids"), resp.Kvs[0].Value)
	if err != nil {
		t.Fatal(err)
	}
	for x := range seen {
		if x >= limit {
			t.Fatalf("value %d handed out at or above the durable limit %d", x, limit)
		}
	}
}

func testCompacted(t *testing.T, cli *clientv3.Client) {
	ctx := context.Background()
	s := openOn(t, cli)
	if _, err := s.Commit(ctx, &catalog.Batch{Ops: []catalog.Op{put("c/1", "a"), put("c/2", "b")}}); err != nil {
		t.Fatal(err)
	}
	err := s.View(ctx, func(r catalog.Reader) error {
		if _, _, err := r.Get([]byte("c/1")); err != nil {
			return err
		}
		var rev int64
		for i := 0; i < 3; i++ {
			v, err := s.Commit(ctx, &catalog.Batch{Ops: []catalog.Op{put("c/1", fmt.Sprint(i))}})
			if err != nil {
				return err
			}
			rev = int64(v)
		}
		if _, err := cli.Compact(ctx, rev); err != nil {
			return err
		}
		_, _, gerr := r.Get([]byte("c/2"))
		serr := r.Scan([]byte("c/"), []byte("c0"), func(catalog.KV) error { return nil })
		for _, err := range []error{gerr, serr} {
			var ce *CompactedError
			if !errors.Is(err, ErrCompacted) || !errors.As(err, &ce) || ce.Revision == 0 {
				return fmt.Errorf("read of a compacted snapshot: %v, want ErrCompacted", err)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	// A fresh view works.
	if v, _, err := getKey(t, s, "c/1"); err != nil || string(v) != "2" {
		t.Fatalf("fresh view: %q %v", v, err)
	}
}

func testOpenChecks(t *testing.T, cli *clientv3.Client) {
	ctx := context.Background()
	err := Options{Prefix: "nope", MaxTxnOps: 1, MaxRequestBytes: 10, RequestTimeout: -1}.Validate()
	for _, want := range []string{"catalog.etcd.client", "catalog.etcd.prefix", "catalog.etcd.max_txn_ops", "catalog.etcd.max_request_bytes", "catalog.etcd.request_timeout"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Fatalf("Validate() = %v, lacks %s", err, want)
		}
	}
	// More ops per txn than the server takes.
	_, err = Open(ctx, Options{Client: cli, Prefix: "/big/", MaxTxnOps: 4096})
	if err == nil || !strings.Contains(err.Error(), "max-txn-ops") {
		t.Fatalf("open with max_txn_ops above the server's: %v", err)
	}
	// A newer format under the prefix is refused.
	s := openOn(t, cli)
	s.Close()
	key := s.Prefix() + "k/" + catalog.KeyFormat
	if _, err := cli.Put(ctx, key, string(catalog.EncodeMeta(catalog.Meta{FormatVersion: catalog.FormatVersion + 1}))); err != nil {
		t.Fatal(err)
	}
	_, err = Open(ctx, Options{Client: cli, Prefix: s.Prefix()})
	var fe *catalog.FormatError
	if !errors.Is(err, catalog.ErrFormat) || !errors.As(err, &fe) || !strings.Contains(err.Error(), s.Prefix()) {
		t.Fatalf("open newer format: %v", err)
	}
	// The limit probe wrote nothing.
	resp, err := cli.Get(ctx, "/big/", clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil || resp.Count != 0 {
		t.Fatalf("probe left %d keys (%v)", resp.Count, err)
	}
}

package etcdcat

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/hostd-dev/hostd/runtime/catalog"
)

// testOutsideRaces: another store on the prefix (an old and a new leader
// for a moment) that writes between a round's read and its txn makes the
// txn's compares fail. The writers are validated again: those whose
// checks still hold commit (a race is never their failure), those whose
// checks no longer hold get ErrConflict.
func testOutsideRaces(t *testing.T, cli *clientv3.Client) {
	ctx := context.Background()
	s := openOn(t, cli)
	other, err := Open(ctx, Options{Client: cli, Prefix: s.Prefix()})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	write := func(b *catalog.Batch) {
		if _, err := other.Commit(ctx, b); err != nil {
			t.Error(err)
		}
	}
	v0, err := s.Commit(ctx, &catalog.Batch{Ops: []catalog.Op{put("d/a", "1"), put("d/b", "1"), put("x", "1")}})
	if err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	var outside func()
	calls := 0
	s.c.afterRead = func() {
		calls++
		once.Do(outside)
	}
	rangeCheck := catalog.RangeCheck{Start: []byte("d/a"), End: []byte("d/b")} // [d/a, d/b): only d/a
	rangeCheck.Seen = []catalog.KeyVersion{{Key: []byte("d/a"), Version: v0}}

	// 1. An outside delete under the range's directory but outside the
	// range moves its generation: a race, not a conflict.
	outside = func() { write(&catalog.Batch{Ops: []catalog.Op{{Key: []byte("d/b"), Delete: true}}}) }
	if _, err := s.Commit(ctx, &catalog.Batch{RangeChecks: []catalog.RangeCheck{rangeCheck}, Ops: []catalog.Op{put("y", "1")}}); err != nil {
		t.Fatalf("commit raced by an unrelated delete: %v", err)
	}
	if calls != 2 {
		t.Fatalf("%d txns tried, want 2 (one lost the race, one committed)", calls)
	}
	// 2. An outside write to a checked key: the writer conflicts, alone.
	once = sync.Once{}
	outside = func() { write(&catalog.Batch{Ops: []catalog.Op{put("x", "outside")}}) }
	var wg sync.WaitGroup
	var errA, errB error
	queueN, release := hold(t, s)
	wg.Add(2)
	go func() {
		defer wg.Done()
		_, errA = s.Commit(ctx, &catalog.Batch{Checks: []catalog.Check{{Key: []byte("x"), Version: v0}}, Ops: []catalog.Op{put("z", "a")}})
	}()
	queueN(1)
	go func() {
		defer wg.Done()
		_, errB = s.Commit(ctx, &catalog.Batch{RangeChecks: []catalog.RangeCheck{rangeCheck}, Ops: []catalog.Op{put("w", "b")}})
	}()
	queueN(2)
	release()
	wg.Wait()
	if !errors.Is(errA, catalog.ErrConflict) || errB != nil {
		t.Fatalf("raced round: checked writer %v (want ErrConflict), other writer %v (want nil)", errA, errB)
	}
	if _, _, err := getKey(t, s, "z"); !errors.Is(err, catalog.ErrNotFound) {
		t.Fatalf("conflicting writer applied: %v", err)
	}
	if v, _, _ := getKey(t, s, "w"); string(v) != "b" {
		t.Fatalf("w = %q", v)
	}
	// 3. An outside delete inside the range: the range check conflicts.
	once = sync.Once{}
	outside = func() { write(&catalog.Batch{Ops: []catalog.Op{{Key: []byte("d/a"), Delete: true}}}) }
	_, err = s.Commit(ctx, &catalog.Batch{RangeChecks: []catalog.RangeCheck{rangeCheck}, Ops: []catalog.Op{put("v", "1")}})
	if !errors.Is(err, catalog.ErrConflict) || !strings.Contains(err.Error(), "removed") {
		t.Fatalf("range check after an outside delete in it: %v", err)
	}
}

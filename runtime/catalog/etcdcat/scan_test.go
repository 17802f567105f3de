package etcdcat

import (
	"context"
	"fmt"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/hostd-dev/hostd/runtime/catalog"
)

// testScanStreamAndPaged: a scan streams (RangeStream) or pages (etcd
// before 3.7) with the same result — every key once, in order, at the
// view's revision even when the range changes during the scan — and
// stops early on ErrStop without leaking the stream.
func testScanStreamAndPaged(t *testing.T, cli *clientv3.Client) {
	s := openOn(t, cli)
	ctx := context.Background()
	const n = 1000
	for i := 0; i < n; i += 100 {
		var ops []catalog.Op
		for j := i; j < i+100; j++ {
			ops = append(ops, put(fmt.Sprintf("scan/%04d", j), "v1"))
		}
		if _, err := s.Commit(ctx, &catalog.Batch{Ops: ops}); err != nil {
			t.Fatal(err)
		}
	}
	for _, paged := range []bool{false, true} {
		s.noStream.Store(paged)
		var keys []string
		changed := false
		err := s.View(ctx, func(r catalog.Reader) error {
			return r.Scan([]byte("scan/"), []byte("scan0"), func(kv catalog.KV) error {
				if !changed {
					// A write after the view's revision: the scan must
					// not see it.
					if _, err := s.Commit(ctx, &catalog.Batch{Ops: []catalog.Op{put("scan/0999", "v2")}}); err != nil {
						return err
					}
					changed = true
				}
				if string(kv.Key) == "scan/0999" && string(kv.Value) != "v1" {
					return fmt.Errorf("scan saw %q written after its snapshot", kv.Value)
				}
				keys = append(keys, string(kv.Key))
				return nil
			})
		})
		if err != nil {
			t.Fatalf("paged=%v: %v", paged, err)
		}
		if len(keys) != n {
			t.Fatalf("paged=%v: %d keys, want %d", paged, len(keys), n)
		}
		for i, k := range keys {
			if k != fmt.Sprintf("scan/%04d", i) {
				t.Fatalf("paged=%v: key %d is %s", paged, i, k)
			}
		}
		if _, err := s.Commit(ctx, &catalog.Batch{Ops: []catalog.Op{put("scan/0999", "v1")}}); err != nil {
			t.Fatal(err)
		}
		seen := 0
		err = s.View(ctx, func(r catalog.Reader) error {
			return r.Scan([]byte("scan/"), []byte("scan0"), func(catalog.KV) error {
				seen++
				if seen == 10 {
					return catalog.ErrStop
				}
				return nil
			})
		})
		if err != nil || seen != 10 {
			t.Fatalf("paged=%v: early stop: %d keys, %v", paged, seen, err)
		}
	}
}

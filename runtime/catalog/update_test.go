package catalog

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
)

func TestTrackedRecordsReads(t *testing.T) {
	ctx := context.Background()
	db := openTest(t)
	v0, _ := db.Commit(ctx, &Batch{Ops: []Op{put("t/a", "1"), put("t/b", "2"), put("t/c", "3")}})
	var checks []Check
	var ranges []RangeCheck
	db.View(ctx, func(r Reader) error {
		tr := NewTracked(r)
		tr.Get([]byte("t/a"))
		tr.Get([]byte("t/missing"))
		tr.Get([]byte("t/a"))
		tr.Scan([]byte("t/"), []byte("t0"), func(kv KV) error {
			if string(kv.Key) == "t/b" {
				return ErrStop
			}
			return nil
		})
		checks, ranges = tr.Checks()
		return nil
	})
	if len(checks) != 2 || string(checks[0].Key) != "t/a" || checks[0].Version != v0 || checks[1].Version != 0 {
		t.Fatalf("checks = %+v", checks)
	}
	if len(ranges) != 1 || string(ranges[0].End) != "t/b\x00" || len(ranges[0].Seen) != 2 {
		t.Fatalf("ranges = %+v", ranges)
	}
	// A write past the stopped scan's end does not conflict; one inside does.
	db.Commit(ctx, &Batch{Ops: []Op{put("t/d", "4")}})
	if _, err := db.Commit(ctx, &Batch{RangeChecks: ranges}); err != nil {
		t.Fatalf("outside covered range: %v", err)
	}
	db.Commit(ctx, &Batch{Ops: []Op{put("t/aa", "x")}})
	if _, err := db.Commit(ctx, &Batch{RangeChecks: ranges}); !errors.Is(err, ErrConflict) {
		t.Fatalf("inside covered range: %v", err)
	}
}

// TestUpdateCounterHammer: many goroutines increment one counter with
// Update; conflicts are retried and no increment is lost.
func TestUpdateCounterHammer(t *testing.T) {
	ctx := context.Background()
	db := openTest(t)
	const workers, each = 16, 20
	var wg sync.WaitGroup
	var failures sync.Map
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for i := 0; i < each; i++ {
				for {
					err := Update(ctx, db, func(r *Tracked) ([]Op, error) {
						v, _, err := r.Get([]byte("ctr"))
						if err != nil && !errors.Is(err, ErrNotFound) {
							return nil, err
						}
						n, _ := strconv.Atoi(string(v))
						return []Op{put("ctr", strconv.Itoa(n+1)), put(fmt.Sprintf("log/%02d/%02d", w, i), "x")}, nil
					})
					if err == nil {
						break
					}
					if !errors.Is(err, ErrConflict) {
						failures.Store(w, err)
						return
					}
				}
			}
		}(w)
	}
	wg.Wait()
	failures.Range(func(k, v any) bool { t.Errorf("worker %v: %v", k, v); return true })
	v, _, err := get(t, db, "ctr")
	if err != nil || string(v) != strconv.Itoa(workers*each) {
		t.Fatalf("counter = %s %v, want %d", v, err, workers*each)
	}
	t.Logf("stats: %+v", db.Stats())
}

// TestUpdateRangeInvariant: writers each insert a member only while the
// range holds fewer than 5 (a scan-based invariant); range checks keep it.
func TestUpdateRangeInvariant(t *testing.T) {
	ctx := context.Background()
	db := openTest(t)
	var wg sync.WaitGroup
	for w := 0; w < 20; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for {
				err := Update(ctx, db, func(r *Tracked) ([]Op, error) {
					n := 0
					if err := r.Scan([]byte("grp/"), []byte("grp0"), func(KV) error { n++; return nil }); err != nil {
						return nil, err
					}
					if n >= 5 {
						return nil, nil
					}
					return []Op{put(fmt.Sprintf("grp/%02d", w), "m")}, nil
				})
				if !errors.Is(err, ErrConflict) {
					return
				}
			}
		}(w)
	}
	wg.Wait()
	n := 0
	db.View(ctx, func(r Reader) error {
		return r.Scan([]byte("grp/"), []byte("grp0"), func(KV) error { n++; return nil })
	})
	if n != 5 {
		t.Fatalf("group has %d members, want exactly 5", n)
	}
}

// conflictStore fails every commit with ErrConflict (a fault injector).
type conflictStore struct {
	Store
	commits int
}

func (c *conflictStore) Commit(ctx context.Context, b *Batch) (Version, error) {
	c.commits++
	return 0, fmt.Errorf("%w: injected", ErrConflict)
}

func TestUpdateGivesUp(t *testing.T) {
	db := openTest(t)
	cs := &conflictStore{Store: db}
	err := Update(context.Background(), cs, func(r *Tracked) ([]Op, error) {
		return []Op{put("k", "v")}, nil
	})
	if !errors.Is(err, ErrConflict) || !strings.Contains(err.Error(), "gave up after 16 attempts") || cs.commits != UpdateAttempts {
		t.Fatalf("err = %v after %d commits", err, cs.commits)
	}
	myErr := errors.New("mine")
	if err := Update(context.Background(), db, func(*Tracked) ([]Op, error) { return nil, myErr }); err != myErr {
		t.Fatalf("fn error: %v", err)
	}
}

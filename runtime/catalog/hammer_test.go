package catalog

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
)

// TestHammerMixed runs commits with checks, range scans, snapshots and
// sequence allocations concurrently (run with -race). Invariants: every
// snapshot sees the two halves of each pair written together (atomicity),
// and sequence values are unique.
func TestHammerMixed(t *testing.T) {
	ctx := context.Background()
	db := openTest(t, func(o *Options) { o.SequenceBlock = 3 })
	var wg sync.WaitGroup
	errc := make(chan error, 64)
	seqs := sync.Map{}
	for w := 0; w < 8; w++ {
		wg.Add(3)
		go func(w int) { // atomic pair writer
			defer wg.Done()
			for i := 0; i < 40; i++ {
				v := fmt.Sprintf("%d-%d", w, i)
				err := Update(ctx, db, func(r *Tracked) ([]Op, error) {
					if _, _, err := r.Get([]byte("pair/a")); err != nil && !errors.Is(err, ErrNotFound) {
						return nil, err
					}
					return []Op{put("pair/a", v), put("pair/b", v)}, nil
				})
				if err != nil && !errors.Is(err, ErrConflict) {
					errc <- err
					return
				}
			}
		}(w)
		go func() { // snapshot reader
			defer wg.Done()
			for i := 0; i < 60; i++ {
				err := db.View(ctx, func(r Reader) error {
					a, _, ea := r.Get([]byte("pair/a"))
					b, _, eb := r.Get([]byte("pair/b"))
					if (ea == nil) != (eb == nil) || string(a) != string(b) {
						return fmt.Errorf("torn pair: %q/%v vs %q/%v", a, ea, b, eb)
					}
					return r.Scan([]byte("pair/"), []byte("pair0"), func(KV) error { return nil })
				})
				if err != nil {
					errc <- err
					return
				}
			}
		}()
		go func() { // sequences
			defer wg.Done()
			for i := 0; i < 50; i++ {
				v, err := db.NextSequence(ctx, "h", 2)
				if err != nil {
					errc <- err
					return
				}
				for _, x := range []uint64{v, v + 1} {
					if _, dup := seqs.LoadOrStore(x, true); dup {
						errc <- fmt.Errorf("sequence value %d handed out twice", x)
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Fatal(err)
	}
}

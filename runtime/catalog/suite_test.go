package catalog_test

import (
	"context"
	"errors"
	"testing"

	"github.com/hostd-dev/hostd/runtime/catalog"
	"github.com/hostd-dev/hostd/runtime/catalog/catalogtest"
)

// TestConformance runs the backend-independent suite against Badger (the
// tests of shared rounds, checks, range checks, sequences, sizes, close,
// the hammer and the Update helpers live there).
func TestConformance(t *testing.T) {
	catalogtest.Run(t, func(t *testing.T) catalog.Store {
		o := catalog.DefaultOptions(t.TempDir())
		o.MemTableSize = 8 << 20 // fast to open; the default is for production
		db, err := catalog.Open(o)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { db.Close() })
		// Open commits the format record through the committer.
		if st := db.Stats(); st.Committed != 1 || st.Txns != 1 {
			t.Fatalf("stats after open %+v: want the format record committed", st)
		}
		return db
	})
}

// TestBadgerPrefixRefused: Badger's own key prefix is not a catalog key.
func TestBadgerPrefixRefused(t *testing.T) {
	db, err := catalog.OpenMemory()
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	_, err = db.Commit(context.Background(), &catalog.Batch{Ops: []catalog.Op{{Key: []byte("!badger!x"), Value: []byte("x")}}})
	if !errors.Is(err, catalog.ErrInvalid) {
		t.Fatalf("!badger! key: %v, want ErrInvalid", err)
	}
}

// TestHammerSmallSequenceBlock: the hammer with a sequence block of 3, so
// that nearly every allocation reserves (as the hammer did before it
// moved into the suite).
func TestHammerSmallSequenceBlock(t *testing.T) {
	o := catalog.DefaultOptions(t.TempDir())
	o.MemTableSize = 8 << 20
	o.SequenceBlock = 3
	db, err := catalog.Open(o)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	catalogtest.HammerMixed(t, db)
}

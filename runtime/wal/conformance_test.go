package wal_test

import (
	"context"
	"testing"

	"github.com/hostd-dev/hostd/runtime/wal"
	"github.com/hostd-dev/hostd/runtime/wal/waltest"
)

// TestConformance runs the backend-neutral suite against the embedded WAL
// on a Badger catalog.
func TestConformance(t *testing.T) {
	waltest.Run(t, func(t *testing.T) wal.Log {
		db := openDB(t, t.TempDir())
		t.Cleanup(func() { db.Close() })
		w, err := wal.Open(context.Background(), wal.Config{Store: db})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { w.Close() })
		return w
	})
}

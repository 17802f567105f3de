package catalog_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/hostd-dev/hostd/runtime/catalog"
)

// An empty value-log or memtable file, as Badger leaves behind when a start
// fails for lack of disk room, must not make every later start fail; a
// non-empty catalog next to it keeps its data.
func TestOpenAfterFailedStartLeftEmptyFiles(t *testing.T) {
	for _, name := range []string{"000001.vlog", "00001.mem"} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			if err := os.WriteFile(filepath.Join(dir, name), nil, 0o600); err != nil {
				t.Fatal(err)
			}
			db, err := catalog.Open(catalog.DefaultOptions(dir))
			if err != nil {
				t.Fatalf("open with an empty %s left behind: %v", name, err)
			}
			ctx := context.Background()
			if _, err := db.Commit(ctx, &catalog.Batch{Ops: []catalog.Op{{Key: []byte("bc/t"), Value: []byte("v")}}}); err != nil {
				t.Fatal(err)
			}
			if err := db.Close(); err != nil {
				t.Fatal(err)
			}
			db, err = catalog.Open(catalog.DefaultOptions(dir))
			if err != nil {
				t.Fatalf("reopen: %v", err)
			}
			defer db.Close()
			err = db.View(ctx, func(r catalog.Reader) error {
				v, _, err := r.Get([]byte("bc/t"))
				if err == nil && string(v) != "v" {
					t.Errorf("value %q after reopen", v)
				}
				return err
			})
			if err != nil {
				t.Fatalf("read after reopen: %v", err)
			}
		})
	}
}

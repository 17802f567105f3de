package host

import (
	"bytes"
	"context"
	"path/filepath"
	"testing"

	"github.com/hostd-dev/hostd/client"
	"github.com/hostd-dev/hostd/runtime/catalog"
)

// TestBackupRestore: an online backup over the API restores into a new
// directory holding the same state (a persisted sequence continues past
// every value handed out before the backup).
func TestBackupRestore(t *testing.T) {
	h := startHost(t, testConfig(t))
	ctx := context.Background()
	var last uint64
	for i := 0; i < 20; i++ {
		v, err := h.Catalog().NextSequence(ctx, "backup-test", 3)
		if err != nil {
			t.Fatal(err)
		}
		last = v + 2
	}
	c, _ := client.New(h.URL())
	var buf bytes.Buffer
	ver, err := c.Backup(ctx, &buf)
	if err != nil {
		t.Fatal(err)
	}
	if ver == 0 || buf.Len() == 0 {
		t.Fatalf("version %d, %d bytes", ver, buf.Len())
	}
	dir := filepath.Join(t.TempDir(), "restored")
	if err := catalog.Restore(dir, bytes.NewReader(buf.Bytes())); err != nil {
		t.Fatal(err)
	}
	db, err := catalog.Open(catalog.DefaultOptions(dir))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	next, err := db.NextSequence(ctx, "backup-test", 1)
	if err != nil {
		t.Fatal(err)
	}
	if next <= last {
		t.Fatalf("restored sequence handed out %d again (last before backup %d)", next, last)
	}
	// A truncated backup is refused.
	if err := catalog.Restore(filepath.Join(t.TempDir(), "x"), bytes.NewReader(buf.Bytes()[:buf.Len()-10])); err == nil {
		t.Fatal("truncated backup restored")
	}
}

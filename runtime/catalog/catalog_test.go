package catalog

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) != "" {
		seqChild()
		return
	}
	goleak.VerifyTestMain(m)
}

func openTest(t *testing.T, mut ...func(*Options)) *DB {
	t.Helper()
	o := DefaultOptions(t.TempDir())
	o.MemTableSize = 8 << 20 // fast to open; the default is for production
	for _, f := range mut {
		f(&o)
	}
	db, err := Open(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

func get(t *testing.T, db Store, key string) ([]byte, Version, error) {
	t.Helper()
	var (
		v   []byte
		ver Version
	)
	err := db.View(context.Background(), func(r Reader) error {
		var err error
		v, ver, err = r.Get([]byte(key))
		return err
	})
	return v, ver, err
}

func put(k, v string) Op { return Op{Key: []byte(k), Value: []byte(v)} }

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not reached in 10s")
		}
		time.Sleep(time.Millisecond)
	}
}

func TestSequences(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	o := testOptions(dir)
	o.SequenceBlock = 10
	db, err := Open(o)
	if err != nil {
		t.Fatal(err)
	}
	a, _ := db.NextSequence(ctx, "ids", 1)
	b, _ := db.NextSequence(ctx, "ids", 5)
	c, _ := db.NextSequence(ctx, "ids", 20)
	d, _ := db.NextSequence(ctx, "ids", 1)
	if a != 1 || b != 2 || c != 7 || d != 27 {
		t.Fatalf("got %d %d %d %d", a, b, c, d)
	}
	if _, err := db.NextSequence(ctx, "ids", 0); !errors.Is(err, ErrInvalid) {
		t.Fatal(err)
	}
	db.Close()
	if _, err := db.NextSequence(ctx, "x", 1); !errors.Is(err, ErrClosed) {
		t.Fatalf("after close: %v", err)
	}
	db, err = Open(o)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	e, _ := db.NextSequence(ctx, "ids", 1)
	if e <= d {
		t.Fatalf("after reopen got %d, want > %d", e, d)
	}
	other, _ := db.NextSequence(ctx, "other", 1)
	if other != 1 {
		t.Fatalf("independent sequence starts at %d", other)
	}
}

func TestSecondOpenRefused(t *testing.T) {
	dir := t.TempDir()
	db1, err := Open(testOptions(dir))
	if err != nil {
		t.Fatal(err)
	}
	defer db1.Close()
	_, err = Open(testOptions(dir))
	var le *LockedError
	if !errors.Is(err, ErrLocked) || !errors.As(err, &le) || !strings.Contains(err.Error(), dir) {
		t.Fatalf("second open: %v", err)
	}
	// The first keeps working.
	if _, err := db1.Commit(context.Background(), &Batch{Ops: []Op{put("k", "v")}}); err != nil {
		t.Fatal(err)
	}
}

func TestNewerFormatRefused(t *testing.T) {
	dir := t.TempDir()
	db, err := Open(testOptions(dir))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.c.commit(context.Background(), &Batch{Ops: []Op{{Key: []byte(KeyFormat), Value: encodeMeta(Meta{FormatVersion: FormatVersion + 1})}}}, true); err != nil {
		t.Fatal(err)
	}
	db.Close()
	_, err = Open(testOptions(dir))
	var fe *FormatError
	if !errors.Is(err, ErrFormat) || !errors.As(err, &fe) || fe.Found != FormatVersion+1 {
		t.Fatalf("open newer: %v", err)
	}
	abs, _ := filepath.Abs(dir)
	for _, want := range []string{abs, fmt.Sprint(FormatVersion + 1), fmt.Sprint(FormatVersion)} {
		if !strings.Contains(err.Error(), want) {
			t.Fatalf("message %q lacks %q", err, want)
		}
	}
}

func TestOpenMemoryAndOptionsValidate(t *testing.T) {
	db, err := OpenMemory()
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.Commit(context.Background(), &Batch{Ops: []Op{put("m", "v")}}); err != nil {
		t.Fatal(err)
	}
	o := Options{GCInterval: -1}
	err = o.Validate()
	for _, want := range []string{"catalog.dir", "catalog.gc_interval", "catalog.gc_discard_ratio", "catalog.max_key_size", "catalog.max_value_size", "catalog.sequence_block", "catalog.memtable_size"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Fatalf("Validate() = %v, lacks %s", err, want)
		}
	}
}

// testOptions are the defaults with a small memtable (quick to open).
func testOptions(dir string) Options {
	o := DefaultOptions(dir)
	o.MemTableSize = 8 << 20
	return o
}

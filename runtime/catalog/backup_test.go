package catalog

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"
)

func TestBackupRestoreRoundTrip(t *testing.T) {
	ctx := context.Background()
	src := openTest(t)
	var want []string
	var b Batch
	for i := 0; i < 300; i++ {
		k := fmt.Sprintf("bc/%04d", i)
		n := i * 20
		if i%100 == 99 {
			n = 100 << 10 // goes to the value log
		}
		val := bytes.Repeat([]byte{byte(i)}, n)
		b.Ops = append(b.Ops, Op{Key: []byte(k), Value: val})
		if len(b.Ops) == 10 {
			if _, err := src.Commit(ctx, &b); err != nil {
				t.Fatal(err)
			}
			b.Ops = nil
		}
		want = append(want, fmt.Sprintf("%s:%d", k, len(val)))
	}
	src.Commit(ctx, &Batch{Ops: []Op{{Key: []byte("bc/0007"), Delete: true}}})
	want = append(want[:7], want[8:]...)
	seq, _ := src.NextSequence(ctx, "ids", 1)
	var buf bytes.Buffer
	ver, err := src.Backup(ctx, &buf)
	if err != nil {
		t.Fatal(err)
	}
	if ver != src.Version() {
		t.Fatalf("backup version %d, catalog at %d", ver, src.Version())
	}
	// Writes after the backup are not in it.
	src.Commit(ctx, &Batch{Ops: []Op{put("bc/after", "x")}})

	dir := filepath.Join(t.TempDir(), "restored")
	t0 := time.Now()
	if err := Restore(dir, bytes.NewReader(buf.Bytes())); err != nil {
		t.Fatal(err)
	}
	t.Logf("backup of %d bytes restored in %v", buf.Len(), time.Since(t0))
	dst, err := Open(testOptions(dir))
	if err != nil {
		t.Fatal(err)
	}
	defer dst.Close()
	var got []string
	dst.View(ctx, func(r Reader) error {
		return r.Scan([]byte("bc/"), []byte("bc0"), func(kv KV) error {
			got = append(got, fmt.Sprintf("%s:%d", kv.Key, len(kv.Value)))
			return nil
		})
	})
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("restored %d records, want %d", len(got), len(want))
	}
	if dst.Version() != ver {
		t.Fatalf("restored version %d, want %d", dst.Version(), ver)
	}
	if s, _ := dst.NextSequence(ctx, "ids", 1); s <= seq {
		t.Fatalf("restored sequence %d <= %d", s, seq)
	}
	// New commits continue above the restored versions.
	v, err := dst.Commit(ctx, &Batch{Ops: []Op{put("bc/new", "x")}})
	if err != nil || v <= ver {
		t.Fatalf("commit after restore: %d %v", v, err)
	}
}

func TestRestoreRefusals(t *testing.T) {
	ctx := context.Background()
	src := openTest(t)
	src.Commit(ctx, &Batch{Ops: []Op{put("k", "v")}})
	var buf bytes.Buffer
	if _, err := src.Backup(ctx, &buf); err != nil {
		t.Fatal(err)
	}
	good := buf.Bytes()

	// Non-empty directory (e.g. a live catalog) is refused and untouched.
	if err := Restore(src.Dir(), bytes.NewReader(good)); !errors.Is(err, ErrInvalid) {
		t.Fatalf("non-empty dir: %v", err)
	}
	cases := map[string][]byte{
		"truncated":    good[:len(good)-10],
		"no trailer":   good[:len(good)-40],
		"corrupted":    func() []byte { b := bytes.Clone(good); b[20] ^= 0xff; return b }(),
		"not a backup": []byte("hello world, this is not a backup"),
		"empty":        nil,
	}
	for name, data := range cases {
		t.Run(name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "x")
			if err := Restore(dir, bytes.NewReader(data)); !errors.Is(err, ErrBackup) {
				t.Fatalf("err = %v, want ErrBackup", err)
			}
			if _, err := os.Stat(dir); !os.IsNotExist(err) {
				t.Fatalf("failed restore left %s behind", dir)
			}
		})
	}
	// A backup from a newer format is refused with both versions.
	newer := bytes.Clone(good)
	newer[12] = byte(FormatVersion + 1)
	if err := Restore(filepath.Join(t.TempDir(), "n"), bytes.NewReader(newer)); !errors.Is(err, ErrFormat) {
		t.Fatalf("newer: %v", err)
	}
}

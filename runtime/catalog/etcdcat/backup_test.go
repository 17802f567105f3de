package etcdcat

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/hostd-dev/hostd/runtime/catalog"
)

func dump(t *testing.T, s catalog.Store) []string {
	t.Helper()
	var out []string
	err := s.View(context.Background(), func(r catalog.Reader) error {
		return r.Scan(nil, nil, func(kv catalog.KV) error {
			if string(kv.Key) != catalog.KeyFormat {
				out = append(out, fmt.Sprintf("%s:%d:%x", kv.Key, len(kv.Value), firstBytes(kv.Value)))
			}
			return nil
		})
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func firstBytes(v []byte) []byte {
	if len(v) > 4 {
		return v[:4]
	}
	return v
}

func fill(t *testing.T, s catalog.Store) {
	t.Helper()
	ctx := context.Background()
	var b catalog.Batch
	for i := 0; i < 300; i++ {
		n := i * 20
		if i%100 == 99 {
			n = 100 << 10
		}
		b.Ops = append(b.Ops, catalog.Op{Key: []byte(fmt.Sprintf("bc/%04d", i)), Value: bytes.Repeat([]byte{byte(i)}, n)})
		if len(b.Ops) == 10 {
			if _, err := s.Commit(ctx, &b); err != nil {
				t.Fatal(err)
			}
			b.Ops = nil
		}
	}
	mustCommit := func(b *catalog.Batch) {
		if _, err := s.Commit(ctx, b); err != nil {
			t.Fatal(err)
		}
	}
	mustCommit(&catalog.Batch{Ops: []catalog.Op{{Key: []byte("bc/0007"), Delete: true}}})
	mustCommit(&catalog.Batch{Ops: []catalog.Op{put("bc/0008", "rewritten")}})
	if _, err := s.NextSequence(ctx, "ids", 1); err != nil {
		t.Fatal(err)
	}
}

func testBackupRestore(t *testing.T, cli *clientv3.Client) {
	ctx := context.Background()
	src := openOn(t, cli)
	fill(t, src)
	want := dump(t, src)
	seq, _ := src.NextSequence(ctx, "ids", 1)
	var buf bytes.Buffer
	ver, err := src.Backup(ctx, &buf)
	if err != nil || ver == 0 {
		t.Fatalf("backup: %d %v", ver, err)
	}
	// Writes after the backup are not in it.
	src.Commit(ctx, &catalog.Batch{Ops: []catalog.Op{put("bc/after", "x")}})

	o := Options{Client: cli, Prefix: fmt.Sprintf("/restored%d/", prefixN.Add(1))}
	if err := Restore(ctx, o, bytes.NewReader(buf.Bytes())); err != nil {
		t.Fatal(err)
	}
	dst, err := Open(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	defer dst.Close()
	got := dump(t, dst)
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("restored %d records, want %d", len(got), len(want))
	}
	if s, _ := dst.NextSequence(ctx, "ids", 1); s <= seq {
		t.Fatalf("restored sequence %d <= %d", s, seq)
	}
	// Refusals: a non-empty prefix; a corrupted file (nothing left behind).
	if err := Restore(ctx, o, bytes.NewReader(buf.Bytes())); !errors.Is(err, catalog.ErrInvalid) {
		t.Fatalf("restore into a non-empty prefix: %v", err)
	}
	bad := bytes.Clone(buf.Bytes())
	bad[len(bad)-50] ^= 0xff
	o2 := Options{Client: cli, Prefix: fmt.Sprintf("/bad%d/", prefixN.Add(1))}
	if err := Restore(ctx, o2, bytes.NewReader(bad)); !errors.Is(err, catalog.ErrBackup) {
		t.Fatalf("corrupted backup: %v", err)
	}
	if resp, err := cli.Get(ctx, o2.Prefix, clientv3.WithPrefix(), clientv3.WithCountOnly()); err != nil || resp.Count != 0 {
		t.Fatalf("failed restore left %d keys (%v)", resp.Count, err)
	}
	// The same file restores into an embedded (Badger) catalog.
	dir := filepath.Join(t.TempDir(), "badger")
	if err := catalog.Restore(dir, bytes.NewReader(buf.Bytes())); err != nil {
		t.Fatal(err)
	}
	bo := catalog.DefaultOptions(dir)
	bo.MemTableSize = 8 << 20
	db, err := catalog.Open(bo)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if got := dump(t, db); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("etcd backup restored into Badger: %d records, want %d", len(got), len(want))
	}
	if s, _ := db.NextSequence(ctx, "ids", 1); s <= seq {
		t.Fatalf("sequence in Badger %d <= %d", s, seq)
	}
	if _, err := db.Commit(ctx, &catalog.Batch{Ops: []catalog.Op{put("bc/new", "x")}}); err != nil {
		t.Fatal(err)
	}
}

// testBadgerToEtcd: an embedded catalog's backup (what hostd migrate
// reads) restores into etcd with the newest value of every live record.
func testBadgerToEtcd(t *testing.T, cli *clientv3.Client) {
	ctx := context.Background()
	bo := catalog.DefaultOptions(t.TempDir())
	bo.MemTableSize = 8 << 20
	db, err := catalog.Open(bo)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	fill(t, db)
	want := dump(t, db)
	seq, _ := db.NextSequence(ctx, "ids", 1)
	var buf bytes.Buffer
	if _, err := db.Backup(ctx, &buf); err != nil {
		t.Fatal(err)
	}
	o := Options{Client: cli, Prefix: fmt.Sprintf("/migrated%d/", prefixN.Add(1))}
	if err := Restore(ctx, o, bytes.NewReader(buf.Bytes())); err != nil {
		t.Fatal(err)
	}
	s, err := Open(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if got := dump(t, s); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("migrated %d records, want %d:\n%v\n%v", len(got), len(want), got[:5], want[:5])
	}
	if v, _, _ := getKey(t, s, "bc/0008"); string(v) != "rewritten" {
		t.Fatalf("bc/0008 = %q, want the newest value", v)
	}
	if n, _ := s.NextSequence(ctx, "ids", 1); n <= seq {
		t.Fatalf("migrated sequence %d <= %d", n, seq)
	}
	// Migrate streams the same thing without a file; a second migrate
	// into the now non-empty prefix is refused and leaves it as it was.
	o2 := Options{Client: cli, Prefix: fmt.Sprintf("/migrated%d/", prefixN.Add(1))}
	ver, err := Migrate(ctx, db, o2)
	if err != nil || ver != db.Version() {
		t.Fatalf("migrate: %d %v (source at %d)", ver, err, db.Version())
	}
	s2, err := Open(ctx, o2)
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	if got := dump(t, s2); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("Migrate copied %d records, want %d", len(got), len(want))
	}
	if _, err := Migrate(ctx, db, o2); !errors.Is(err, catalog.ErrInvalid) {
		t.Fatalf("migrate into a non-empty prefix: %v", err)
	}
	if got := dump(t, s2); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("refused migrate changed the prefix: %d records", len(got))
	}
}

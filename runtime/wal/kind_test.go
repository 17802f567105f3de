package wal

import (
	"context"
	"errors"
	"testing"

	"github.com/hostd-dev/hostd/runtime/catalog"
)

func openTestWAL(t *testing.T) (*catalog.DB, *WAL) {
	t.Helper()
	o := catalog.DefaultOptions(t.TempDir())
	o.GCInterval = 0
	db, err := catalog.Open(o)
	if err != nil {
		t.Fatal(err)
	}
	w, err := Open(context.Background(), Config{Store: db, Queues: []string{"q"}})
	if err != nil {
		db.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Close(); db.Close() })
	return db, w
}

// Every kind an append may write is stored in the record and read back;
// a data record is the zero value.
func TestRecordKindRoundTrip(t *testing.T) {
	ctx := context.Background()
	_, w := openTestWAL(t)
	recs := []Record{
		{Payload: []byte("d")},
		{Payload: []byte("b"), Props: map[string]string{"hostd.broadcast.id": "1"}, Kind: KindBroadcast},
		{Payload: []byte("m"), Props: map[string]string{"hostd.message.type": "topic.remap"}, Kind: KindMarker},
	}
	ents, err := w.Append(ctx, "q", recs)
	if err != nil {
		t.Fatal(err)
	}
	got, err := w.Read(ctx, "q", 0, 10)
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range []Kind{KindData, KindBroadcast, KindMarker} {
		if ents[i].Kind != want || got[i].Kind != want {
			t.Fatalf("record %d: appended kind %s, read %s, want %s", i, ents[i].Kind, got[i].Kind, want)
		}
	}
	// Only one byte more than the version 1 layout.
	v1 := encodeEntry(1, 2, Record{Payload: []byte("x"), Kind: KindLegacy})
	v2 := encodeEntry(1, 2, Record{Payload: []byte("x"), Kind: KindBroadcast})
	if len(v2) != len(v1)+1 {
		t.Fatalf("v2 entry is %d bytes, v1 %d", len(v2), len(v1))
	}
}

// An entry written before kinds existed (version 1) still reads, as
// KindLegacy, with its properties and payload.
func TestLegacyEntryDecodes(t *testing.T) {
	ctx := context.Background()
	db, w := openTestWAL(t)
	if _, err := w.Append(ctx, "q", []Record{{Payload: []byte("placeholder")}}); err != nil {
		t.Fatal(err)
	}
	old := []byte{1, 5, 0, 1, 1, 'k', 1, 'v', 'o', 'l', 'd'} // version 1: tick 5, cum 0, {k: v}, "old"
	if _, err := db.Commit(ctx, &catalog.Batch{Ops: []catalog.Op{{Key: entryKey("q", 0), Value: old}}}); err != nil {
		t.Fatal(err)
	}
	got, err := w.Read(ctx, "q", 0, 1)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].Kind != KindLegacy || string(got[0].Payload) != "old" || got[0].Props["k"] != "v" || got[0].Tick != 5 {
		t.Fatalf("legacy entry read as %+v", got)
	}
	if got[0].Kind.Hostd() {
		t.Fatal("a legacy entry must not count as hostd's own")
	}
}

// The hostd. property namespace is refused on every data append (Append,
// AppendWith, AppendMulti), and nothing is written; hostd's own kinds may
// carry it. Legacy and unknown kinds cannot be appended.
func TestReservedNamespaceRefused(t *testing.T) {
	ctx := context.Background()
	_, w := openTestWAL(t)
	forged := Record{Payload: []byte("x"), Props: map[string]string{"a": "1", "hostd.broadcast.id": "3", "hostd.x": ""}}
	check := func(name string, err error) {
		t.Helper()
		var re *ReservedPropertyError
		if !errors.As(err, &re) || !errors.Is(err, ErrInvalid) || re.Property != "hostd.broadcast.id" || re.Record != 1 {
			t.Fatalf("%s: %v", name, err)
		}
	}
	_, err := w.Append(ctx, "q", []Record{{Payload: []byte("ok")}, forged})
	check("Append", err)
	_, err = w.AppendWith(ctx, "q", []Record{{}, forged}, nil)
	check("AppendWith", err)
	_, err = w.AppendMulti(ctx, []Part{{Queue: "q", Recs: []Record{{}, forged}}})
	check("AppendMulti", err)
	for _, k := range []Kind{KindLegacy, Kind(9)} {
		if _, err := w.Append(ctx, "q", []Record{{Kind: k}}); !errors.Is(err, ErrInvalid) {
			t.Fatalf("append of kind %s: %v", k, err)
		}
	}
	if b, _ := w.Bounds(ctx, "q"); b.Max != 0 {
		t.Fatalf("refused appends wrote %d entries", b.Max)
	}
	// Properties that only look alike are data.
	ok := Record{Props: map[string]string{"hostd": "1", "Hostd.x": "2", "myhostd.x": "3"}}
	if _, err := w.Append(ctx, "q", []Record{ok, {Kind: KindBroadcast, Props: forged.Props}}); err != nil {
		t.Fatal(err)
	}
	if err := CheckProps(4, map[string]string{"hostd.": ""}); err == nil {
		t.Fatal("the bare prefix is reserved too")
	}
}

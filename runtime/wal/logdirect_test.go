package wal_test

import (
	"context"
	"errors"
	"testing"

	"github.com/hostd-dev/hostd/runtime/wal"
)

func TestBroadcastRecordID(t *testing.T) {
	b := func(props map[string]string) wal.Record { return wal.Record{Kind: wal.KindBroadcast, Props: props} }
	for _, tc := range []struct {
		r    wal.Record
		want string
	}{
		{b(map[string]string{"hostd.broadcast.id": "17"}), "17/t/3"},
		{b(map[string]string{"hostd.broadcast.id": "17", "hostd.broadcast.epoch": "0"}), "17/t/3"},
		{b(map[string]string{"hostd.broadcast.id": "17", "hostd.broadcast.epoch": "2"}), "17/t/3/2"},
		{wal.Record{Kind: wal.KindMarker, Props: map[string]string{"hostd.broadcast.id": "9"}}, "9/t/3"},
		{wal.Record{Props: map[string]string{"hostd.broadcast.id": "17"}}, ""}, // data is never hostd's
		{b(nil), ""},
	} {
		if got := wal.BroadcastRecordID("t/3", tc.r); got != tc.want {
			t.Errorf("BroadcastRecordID(%+v) = %q, want %q", tc.r, got, tc.want)
		}
	}
}

// TestLogDirect: the 1:1 resolver over a Log gives broadcast records their
// IDs, so the engine's appends can be reconciled by ID.
func TestLogDirect(t *testing.T) {
	ctx := context.Background()
	db := openDB(t, t.TempDir())
	defer db.Close()
	w, err := wal.Open(ctx, wal.Config{Store: db})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	d, err := wal.NewLogDirect(ctx, w)
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Check(ctx, wal.ControlChannel); err != nil {
		t.Fatal(err)
	}
	if err := d.Check(ctx, "nope"); !errors.Is(err, wal.ErrNoChannel) {
		t.Fatalf("Check(nope) = %v, want ErrNoChannel", err)
	}
	rec := wal.Record{Kind: wal.KindBroadcast, Payload: []byte("m"), Props: map[string]string{"hostd.broadcast.id": "5"}}
	pos, err := d.Append(ctx, wal.ControlChannel, []wal.Record{rec})
	if err != nil || len(pos) != 1 || pos[0].Offset != 0 || pos[0].Queue != wal.ControlChannel {
		t.Fatalf("Append = %v, %v", pos, err)
	}
	found, err := wal.FindIDs(ctx, w, wal.ControlChannel, 0, []string{"5/" + wal.ControlChannel})
	if err != nil || len(found) != 1 {
		t.Fatalf("FindIDs = %v, %v", found, err)
	}
	msgs, err := d.Read(ctx, wal.ControlChannel, 0, 10)
	if err != nil || len(msgs) != 1 || string(msgs[0].Payload) != "m" || msgs[0].Kind != wal.KindBroadcast {
		t.Fatalf("Read = %+v, %v", msgs, err)
	}
	if mn, mx, err := d.Bounds(ctx, wal.ControlChannel); err != nil || mn != 0 || mx != 1 {
		t.Fatalf("Bounds = %d %d %v", mn, mx, err)
	}
	if n, err := d.NextHint(ctx, wal.ControlChannel); err != nil || n != 1 {
		t.Fatalf("NextHint = %d, %v", n, err)
	}
	if err := d.Wait(ctx, wal.ControlChannel, 0); err != nil {
		t.Fatal(err)
	}
}

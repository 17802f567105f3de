package mapping

import (
	"context"
	"encoding/json"
	"errors"
	"testing"

	"github.com/hostd-dev/hostd/runtime/catalog"
	"github.com/hostd-dev/hostd/runtime/wal"
)

// A producer-state record written before the window existed ({seq, first,
// n}) loads as a window of one: its seq is still a duplicate, the next seq
// appends, and the record then holds both.
func TestProducerStateOldRecordLoads(t *testing.T) {
	ctx := context.Background()
	o := catalog.DefaultOptions(t.TempDir())
	o.SyncWrites, o.GCInterval = false, 0
	db, err := catalog.Open(o)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	w, err := wal.Open(ctx, wal.Config{Store: db})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	m, err := Open(ctx, Config{Store: db, WAL: w, Brokers: []Broker{{Name: "a"}}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.Apply(ctx, Change{Kind: KindCreate, Topic: "t", Queues: 1}); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Append(ctx, "t/0", []wal.Record{{Payload: []byte("x")}, {Payload: []byte("y")}}); err != nil {
		t.Fatal(err)
	}
	key := producerKey("t", 0, "p1")
	old := []byte(`{"seq":3,"first":0,"n":2}`)
	if _, err := db.Commit(ctx, &catalog.Batch{Ops: []catalog.Op{{Key: key, Value: old}}}); err != nil {
		t.Fatal(err)
	}
	pos, dup, err := m.AppendOpts(ctx, "t/0", []wal.Record{{}, {}}, AppendOptions{ProducerID: "p1", Seq: 3})
	if err != nil || !dup || len(pos) != 2 || pos[0].Offset != 0 || pos[1].Offset != 1 || pos[0].Tick == 0 {
		t.Fatalf("retry of the old record's seq: %+v dup=%v %v", pos, dup, err)
	}
	if _, _, err := m.AppendOpts(ctx, "t/0", []wal.Record{{}}, AppendOptions{ProducerID: "p1", Seq: 2}); !errors.Is(err, ErrSequence) {
		t.Fatalf("seq below the old record's: %v", err)
	}
	if _, dup, err := m.AppendOpts(ctx, "t/0", []wal.Record{{}}, AppendOptions{ProducerID: "p1", Seq: 4}); err != nil || dup {
		t.Fatalf("next seq: %v %v", dup, err)
	}
	var st producerState
	err = db.View(ctx, func(r catalog.Reader) error {
		v, _, err := r.Get(key)
		if err != nil {
			return err
		}
		return json.Unmarshal(v, &st)
	})
	if err != nil || st.Seq != 4 || st.First != 2 || st.N != 1 || len(st.Older) != 1 || st.Older[0].Seq != 3 || st.Older[0].First != 0 || st.Older[0].N != 2 {
		t.Fatalf("stored state %+v %v", st, err)
	}
}

// The window keeps the last ProducerWindow appends, oldest dropped first.
func TestProducerStatePush(t *testing.T) {
	var st producerState
	for s := uint64(1); s <= 40; s++ {
		st = st.push(s, s*10, 1)
	}
	if st.Seq != 40 || len(st.Older) != ProducerWindow-1 || st.oldest() != 40-ProducerWindow+1 {
		t.Fatalf("window %+v", st)
	}
	for s := uint64(1); s <= 40; s++ {
		r, ok := st.find(s)
		if in := s > 40-ProducerWindow; ok != in || (ok && r.First != s*10) {
			t.Fatalf("seq %d: found %v %+v", s, ok, r)
		}
	}
}

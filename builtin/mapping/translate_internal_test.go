package mapping

import (
	"context"
	"testing"

	"github.com/hostd-dev/hostd/runtime/catalog"
	"github.com/hostd-dev/hostd/runtime/wal"
)

// TestTranslatePhysicalCacheBehind: when the topic cache does not know a
// physical queue (a Refresh not yet run), the reverse translation falls
// back to scanning the catalog snapshot and still answers.
func TestTranslatePhysicalCacheBehind(t *testing.T) {
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
	m, err := Open(ctx, Config{Store: db, WAL: w, Brokers: []Broker{{Name: "a"}, {Name: "b"}}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.Apply(ctx, Change{Kind: KindCreate, Topic: "t", Queues: 3, Brokers: []string{"a"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Append(ctx, "t/2", []wal.Record{{Payload: []byte("x")}, {Payload: []byte("y")}}); err != nil {
		t.Fatal(err)
	}
	tr, err := m.TranslateLogic(ctx, "t/2", 1)
	if err != nil {
		t.Fatal(err)
	}
	m.mu.Lock()
	delete(m.topics, "t")
	m.mu.Unlock()
	if _, _, ok := m.cachedOwner(tr.Broker, tr.QueueID); ok {
		t.Fatal("cache still knows the queue")
	}
	back, err := m.TranslatePhysical(ctx, tr.Broker, tr.QueueID, 1)
	if err != nil || back.VChannel != "t/2" || back.LogicOffset != 1 {
		t.Fatalf("reverse translation without the cache: %+v %v", back, err)
	}
}

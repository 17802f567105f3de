package mapping_test

import (
	"encoding/binary"
	"errors"
	"sync"
	"testing"

	"github.com/hostd-dev/hostd/builtin/mapping"
	"github.com/hostd-dev/hostd/runtime/catalog"
	"github.com/hostd-dev/hostd/runtime/wal"
)

// countPrefix counts catalog records under prefix.
func countPrefix(t *testing.T, db catalog.Store, prefix string) int {
	t.Helper()
	n := 0
	end := []byte(prefix)
	end[len(end)-1]++
	err := db.View(ctx, func(r catalog.Reader) error {
		return r.Scan([]byte(prefix), end, func(catalog.KV) error { n++; return nil })
	})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestDeleteRemovesGroupOffsetsAndProducers: a topic delete removes the
// topic's group offsets and producer states in the same commit, so after
// delete + create of the same name a group starts uncommitted and a
// producer's old sequence number is not taken for a retry.
func TestDeleteRemovesGroupOffsetsAndProducers(t *testing.T) {
	e := newEnv(t, mapping.Config{Brokers: brokers("a", "b")})
	e.apply(t, mapping.Change{Kind: mapping.KindCreate, Topic: "t", Queues: 2})
	e.apply(t, mapping.Change{Kind: mapping.KindCreate, Topic: "other", Queues: 1})
	e.appendN(t, "t/0", 5, "x")
	e.appendN(t, "other/0", 2, "o")
	pos, dup, err := e.m.AppendOpts(ctx, "t/0", []wal.Record{{Payload: []byte("p")}}, mapping.AppendOptions{ProducerID: "p1", Seq: 7})
	if err != nil || dup || pos[0].Offset != 5 {
		t.Fatalf("producer append: %+v %v %v", pos, dup, err)
	}
	for _, c := range []struct {
		g, vc string
		off   uint64
	}{{"g1", "t/0", 4}, {"g1", "t/1", 0}, {"g2", "t/0", 6}, {"g1", "other/0", 2}} {
		if err := e.m.CommitOffset(ctx, c.g, c.vc, c.off); err != nil {
			t.Fatal(err)
		}
	}
	if ti, _ := e.m.Describe(ctx, "t"); len(ti.Groups) != 3 {
		t.Fatalf("groups before delete: %+v", ti.Groups)
	}

	e.apply(t, mapping.Change{Kind: mapping.KindDelete, Topic: "t"})
	if n := countPrefix(t, e.db, catalog.NSMapping+"o/t\x00"); n != 0 {
		t.Fatalf("%d group offsets of the deleted topic left in the catalog", n)
	}
	if n := countPrefix(t, e.db, catalog.NSMapping+"p/t\x00"); n != 0 {
		t.Fatalf("%d producer states of the deleted topic left in the catalog", n)
	}
	if _, err := e.m.GroupOffset(ctx, "g1", "t/0"); !errors.Is(err, wal.ErrNoChannel) {
		t.Fatalf("group offset of a deleted topic: %v", err)
	}
	// Another topic's offsets are untouched.
	if g, err := e.m.GroupOffset(ctx, "g1", "other/0"); err != nil || !g.Committed || g.Offset != 2 {
		t.Fatalf("other topic's offset: %+v %v", g, err)
	}

	e.apply(t, mapping.Change{Kind: mapping.KindCreate, Topic: "t", Queues: 2})
	e.appendN(t, "t/0", 1, "new")
	for _, vc := range []string{"t/0", "t/1"} {
		g, err := e.m.GroupOffset(ctx, "g1", vc)
		if err != nil || g.Committed || g.Offset != 0 {
			t.Fatalf("old offset leaked into the new %s: %+v %v", vc, g, err)
		}
	}
	lag, err := e.m.Lag(ctx, "g2", "t")
	if err != nil || lag[0].Committed || lag[0].Lag != 1 {
		t.Fatalf("lag on the new topic: %+v %v", lag, err)
	}
	if ti, _ := e.m.Describe(ctx, "t"); len(ti.Groups) != 0 {
		t.Fatalf("describe of the new topic shows old groups: %+v", ti.Groups)
	}
	// The producer's old seq 7 is a new append on the new topic, not a
	// retry answered with the old topic's offset 5.
	pos, dup, err = e.m.AppendOpts(ctx, "t/0", []wal.Record{{Payload: []byte("p")}}, mapping.AppendOptions{ProducerID: "p1", Seq: 7})
	if err != nil || dup || pos[0].Offset != 1 {
		t.Fatalf("producer on the new topic: %+v dup=%v %v", pos, dup, err)
	}
}

// TestGroupCommitRacingDelete: group commits hammering a topic while it is
// deleted never leave an offset behind (the delete's RangeCheck catches a
// commit after its snapshot; the commit's check on the queue record
// catches one after the delete).
func TestGroupCommitRacingDelete(t *testing.T) {
	e := newEnv(t, mapping.Config{Brokers: brokers("a")})
	for round := 0; round < 5; round++ {
		e.apply(t, mapping.Change{Kind: mapping.KindCreate, Topic: "t", Queues: 1})
		e.appendN(t, "t/0", 3, "x")
		var wg sync.WaitGroup
		stop := make(chan struct{})
		for g := 0; g < 3; g++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; ; i++ {
					select {
					case <-stop:
						return
					default:
					}
					err := e.m.CommitOffset(ctx, "g", "t/0", uint64(i%4))
					if errors.Is(err, wal.ErrNoChannel) {
						return // deleted
					}
					if err != nil {
						t.Errorf("commit: %v", err)
						return
					}
				}
			}()
		}
		e.apply(t, mapping.Change{Kind: mapping.KindDelete, Topic: "t"})
		close(stop)
		wg.Wait()
		if n := countPrefix(t, e.db, catalog.NSMapping+"o/t\x00"); n != 0 {
			t.Fatalf("round %d: %d group offsets outlived the delete", round, n)
		}
	}
}

// TestMigrateGroupOffsets: offsets in the old group-first layout move to
// the per-topic one; offsets of topics that are gone are dropped.
func TestMigrateGroupOffsets(t *testing.T) {
	e := newEnv(t, mapping.Config{Brokers: brokers("a")})
	e.apply(t, mapping.Change{Kind: mapping.KindCreate, Topic: "t", Queues: 2})
	e.appendN(t, "t/1", 5, "x")
	legacy := func(g, topic string, q uint32) []byte {
		return binary.BigEndian.AppendUint32([]byte(catalog.NSMapping+"g/"+g+"\x00"+topic+"\x00"), q)
	}
	rec := []byte(`{"offset":3,"at":"2026-01-01T00:00:00Z"}`)
	if _, err := e.db.Commit(ctx, &catalog.Batch{Ops: []catalog.Op{
		{Key: legacy("g1", "t", 1), Value: rec},
		{Key: legacy("g1", "gone", 0), Value: rec},
		{Key: []byte(catalog.NSMapping + "g/garbage"), Value: rec},
	}}); err != nil {
		t.Fatal(err)
	}
	moved, dropped, err := e.m.MigrateGroupOffsets(ctx)
	if err != nil || moved != 1 || dropped != 2 {
		t.Fatalf("migrate: moved %d dropped %d %v", moved, dropped, err)
	}
	g, err := e.m.GroupOffset(ctx, "g1", "t/1")
	if err != nil || !g.Committed || g.Offset != 3 || g.Lag != 2 {
		t.Fatalf("migrated offset: %+v %v", g, err)
	}
	if n := countPrefix(t, e.db, catalog.NSMapping+"g/"); n != 0 {
		t.Fatalf("%d legacy records left", n)
	}
	if moved, dropped, err := e.m.MigrateGroupOffsets(ctx); err != nil || moved+dropped != 0 {
		t.Fatalf("second migrate: %d %d %v", moved, dropped, err)
	}
}

package baseline

import (
	"testing"
	"time"

	badger "github.com/dgraph-io/badger/v4"
)

func TestPercentile(t *testing.T) {
	var d []time.Duration
	for i := 100; i >= 1; i-- {
		d = append(d, time.Duration(i))
	}
	for _, c := range []struct {
		p    float64
		want time.Duration
	}{{0, 1}, {1, 1}, {50, 50}, {99, 99}, {99.5, 100}, {100, 100}} {
		if got := Percentile(d, c.p); got != c.want {
			t.Errorf("p%v = %v, want %v", c.p, got, c.want)
		}
	}
	if Percentile(nil, 50) != 0 {
		t.Error("empty")
	}
}

func TestBaselinesRun(t *testing.T) {
	d := 200 * time.Millisecond
	for _, f := range []func() (Result, error){
		func() (Result, error) { return Fsync(t.TempDir(), 2, 128, d) },
		func() (Result, error) { return BadgerSync(t.TempDir(), 2, 128, d) },
		func() (Result, error) { return HTTPJSON(4, d) },
	} {
		r, err := f()
		if err != nil {
			t.Fatal(err)
		}
		if r.Ops == 0 || r.Rate() <= 0 || r.P50 <= 0 || r.P99 < r.P50 {
			t.Fatalf("implausible result %s", r)
		}
		t.Log(r)
	}
}

func TestBadgerWrite(t *testing.T) {
	b, err := NewBadger(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	// 5 MiB in 20,000 keys does not fit one Badger transaction at the
	// default sizes: Write must split it, not fail.
	d, txns, err := b.Write(20000, 5<<20)
	if err != nil {
		t.Fatal(err)
	}
	if d <= 0 || txns < 1 {
		t.Fatalf("Write = %v, %d txns", d, txns)
	}
	n := 0
	if err := b.db.View(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{Prefix: []byte("w/")})
		defer it.Close()
		for it.Rewind(); it.Valid(); it.Next() {
			n++
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if n != 20000 {
		t.Fatalf("wrote %d keys, want 20000", n)
	}
	if _, _, err := b.Write(0, 10); err == nil {
		t.Fatal("Write(0) should fail")
	}
}

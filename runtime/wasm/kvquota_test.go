package wasm

import (
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/hostd-dev/hostd/runtime/catalog"
)

// Issue 12, escape 3: with kv_max_keys 20, twelve concurrent callbacks
// each adding five keys committed 60 keys, because each checked the quota
// against the usage it read, not against what committed. Now the usage
// record is part of each commit: the callbacks that lose the race
// conflict, run again (as the broadcast engine re-runs them), and are
// then refused for quota. Exactly 20 keys commit, and the record matches
// a scan.
func TestKVQuotaHoldsUnderConcurrentCallbacks(t *testing.T) {
	store := openStore(t)
	r := mustRuntime(t, Config{Plugins: []Spec{{Name: "echo", Path: echoWasm(t), Limits: Limits{KVMaxKeys: 20, PoolSize: 12}}},
		Store: store})
	// All twelve callbacks run before any commits (a barrier), so every
	// one of them reads the same, empty usage: the race at its widest.
	var ran sync.WaitGroup
	ran.Add(12)
	var wg sync.WaitGroup
	var mu sync.Mutex
	committed, refused := 0, 0
	for g := range 12 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var puts []string
			for i := range 5 {
				puts = append(puts, fmt.Sprintf("g%02d-%d=v", g, i))
			}
			m := msg("Echo", "put "+strings.Join(puts, " "))
			first := true
			for attempt := 0; ; attempt++ {
				res, err := r.Ack(bg, m)
				if first {
					first = false
					ran.Done()
					ran.Wait()
				}
				if err != nil {
					if !strings.Contains(err.Error(), "quota") {
						t.Errorf("callback %d: %v", g, err)
					}
					mu.Lock()
					refused++
					mu.Unlock()
					return
				}
				err = commit(bg, store, res)
				if err == nil {
					mu.Lock()
					committed++
					mu.Unlock()
					return
				}
				if !isConflict(err) || attempt > 100 {
					t.Errorf("callback %d commit: %v", g, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	keys := 0
	if err := store.View(bg, func(rd catalog.Reader) error {
		ns := NamespacePrefix("echo")
		return rd.Scan(ns, prefixEnd(ns), func(catalog.KV) error { keys++; return nil })
	}); err != nil {
		t.Fatal(err)
	}
	if keys > 20 {
		t.Fatalf("%d keys committed with kv_max_keys 20 (%d callbacks committed)", keys, committed)
	}
	if committed != 4 || refused != 8 || keys != 20 {
		t.Fatalf("committed %d, refused %d, %d keys; want 4, 8, 20", committed, refused, keys)
	}
	uk, ub, err := r.KVUsage(bg, "echo")
	if err != nil || uk != 20 || ub != int64(20*len("pkv/echo/g00-0")+20) {
		t.Fatalf("usage record %d keys %d bytes %v", uk, ub, err)
	}
}

// The usage record follows every kind of write exactly: creates, resizes,
// deletes, same-size overwrites (which do not touch the record, so they do
// not conflict with one another), and a namespace with data from before
// records existed is counted by a scan at its first write.
func TestKVUsageRecordIsExact(t *testing.T) {
	store := openStore(t)
	ns := NamespacePrefix("echo")
	// Data written before usage records existed.
	if _, err := store.Commit(bg, &catalog.Batch{Ops: []catalog.Op{{Key: append(append([]byte(nil), ns...), "old"...), Value: []byte("123")}}}); err != nil {
		t.Fatal(err)
	}
	r := mustRuntime(t, Config{Plugins: []Spec{{Name: "echo", Path: echoWasm(t), Limits: Limits{PoolSize: 2}}}, Store: store})
	run := func(payload string) *AckResult {
		t.Helper()
		res, err := r.Ack(bg, msg("Echo", payload))
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	check := func(what string, keys, size int64) {
		t.Helper()
		var scanKeys, scanBytes int64
		if err := store.View(bg, func(rd catalog.Reader) error {
			return rd.Scan(ns, prefixEnd(ns), func(kv catalog.KV) error {
				scanKeys++
				scanBytes += int64(len(kv.Key) + len(kv.Value))
				return nil
			})
		}); err != nil {
			t.Fatal(err)
		}
		k, b, err := r.KVUsage(bg, "echo")
		if err != nil || k != keys || b != size || k != scanKeys || b != scanBytes {
			t.Fatalf("%s: usage %d keys %d bytes (%v); scan %d keys %d bytes; want %d, %d", what, k, b, err, scanKeys, scanBytes, keys, size)
		}
	}
	kb := int64(len(ns) + 1) // a one-byte key
	check("before any write", 1, kb+2+3)
	if err := commit(bg, store, run("put a=1 b=22")); err != nil {
		t.Fatal(err)
	}
	check("two creates", 3, kb+2+3+kb+1+kb+2)
	if err := commit(bg, store, run("put a=111 old=")); err != nil {
		t.Fatal(err)
	}
	check("resizes", 3, kb+2+0+kb+3+kb+2)
	if err := commit(bg, store, run("del b")); err != nil {
		t.Fatal(err)
	}
	check("delete", 2, kb+2+kb+3)
	// Same-size overwrites check their keys, not the record: two of them
	// on different keys both commit; then a resize still sees the truth.
	x, y := run("put a=999"), run("put old=")
	for _, res := range []*AckResult{x, y} {
		for _, op := range res.Ops {
			if string(op.Key) == string(usageKey(ns)) {
				t.Fatalf("same-size overwrite writes the usage record: %+v", res.Ops)
			}
		}
		if err := commit(bg, store, res); err != nil {
			t.Fatal(err)
		}
	}
	check("same-size overwrites", 2, kb+2+kb+3)
	// A same-size overwrite and a delete of the same key race: whichever
	// commits second conflicts (the overwrite would resurrect the key).
	ow, del := run("put a=888"), run("del a")
	if err := commit(bg, store, del); err != nil {
		t.Fatal(err)
	}
	if err := commit(bg, store, ow); !isConflict(err) {
		t.Fatalf("overwrite after a concurrent delete: %v, want conflict", err)
	}
	check("overwrite lost to a delete", 1, kb+2)
	// A callback that writes nothing adds nothing to its batch.
	if res := run("ok"); len(res.Checks)+len(res.Ops)+len(res.RangeChecks) != 0 {
		t.Fatalf("read-nothing write-nothing callback: %+v", res)
	}
}

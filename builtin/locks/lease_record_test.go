package locks

import (
	"context"
	"fmt"
	"math"
	"sort"
	"testing"
	"time"

	"github.com/hostd-dev/hostd/runtime/catalog"
	"github.com/hostd-dev/hostd/sdk/abi"
)

func TestSeqKeyIsZeroPadded(t *testing.T) {
	for _, n := range []uint64{0, 1, 9, 10, 12345, 1 << 40, math.MaxUint64} {
		if got, want := string(seqKey(grantPrefix, n)), fmt.Sprintf("%s%020d", grantPrefix, n); got != want {
			t.Errorf("seqKey(%d) = %q, want %q", n, got, want)
		}
		if back, err := parseSeqKey(grantPrefix, seqKey(grantPrefix, n)); err != nil || back != n {
			t.Errorf("parseSeqKey(seqKey(%d)) = %d, %v", n, back, err)
		}
	}
}

// lockRecords lists the keys under the lock namespace.
func lockRecords(t *testing.T, db catalog.Store) []string {
	t.Helper()
	var keys []string
	err := db.View(context.Background(), func(r catalog.Reader) error {
		return r.Scan([]byte(catalog.NSLock), []byte(catalog.NSLock+"~"), func(kv catalog.KV) error {
			keys = append(keys, string(kv.Key))
			return nil
		})
	})
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(keys)
	return keys
}

// A release deletes the renewal record only where one may exist, and no
// record survives a grant in any way it can end: released without a
// renewal, released after a renewal, renewed then expired, and held
// across a restart (which writes a renewal record) then released.
func TestLeaseRecordsGoneAfterEveryEnd(t *testing.T) {
	e := newLeaseEnv(t, false)
	ctx := context.Background()
	plain := e.acquire("plain", 0, ex("r", "plain"))
	renewed := e.acquire("renewed", 0, ex("r", "renewed"))
	if _, err := e.svc.Renew(ctx, renewed.ID, renewed.Token, 20*time.Second); err != nil {
		t.Fatal(err)
	}
	expiring := e.acquire("expiring", time.Second, ex("r", "expiring"))
	if _, err := e.svc.Renew(ctx, expiring.ID, expiring.Token, time.Second); err != nil {
		t.Fatal(err)
	}
	restarted := e.acquire("restarted", 0, ex("r", "restarted"))
	want := []string{
		string(grantKey(plain.Fence)), string(grantKey(renewed.Fence)), string(grantKey(expiring.Fence)), string(grantKey(restarted.Fence)),
		string(renewalKey(renewed.Fence)), string(renewalKey(expiring.Fence)),
	}
	sort.Strings(want)
	if got := lockRecords(t, e.store); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("records %v, want %v", got, want)
	}
	for _, g := range []*Grant{plain, renewed} {
		if err := e.svc.Release(ctx, g.ID, g.Token); err != nil {
			t.Fatal(err)
		}
	}
	e.clock.Advance(2 * time.Second) // expiring's TTL runs out
	deadline := time.Now().Add(30 * time.Second)
	for e.svc.Stats().Grants != 1 {
		if time.Now().After(deadline) {
			t.Fatalf("expired grant not reaped: %+v", e.svc.Stats())
		}
		time.Sleep(5 * time.Millisecond)
	}
	e.restart() // writes a renewal record for the surviving grant
	if got := lockRecords(t, e.store); len(got) != 2 {
		t.Fatalf("after restart: records %v, want the grant and its renewal", got)
	}
	if err := e.svc.Release(ctx, restarted.ID, restarted.Token); err != nil {
		t.Fatal(err)
	}
	if got := lockRecords(t, e.store); len(got) != 0 {
		t.Fatalf("records left: %v", got)
	}
	if _, err := e.svc.Acquire(ctx, AcquireRequest{Owner: "again", Keys: []abi.ResourceKey{ex("r", "restarted")}}); err != nil {
		t.Fatal(err)
	}
}

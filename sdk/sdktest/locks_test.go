package sdktest_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/hostd-dev/hostd/sdk"
	"github.com/hostd-dev/hostd/sdk/abi"
	"github.com/hostd-dev/hostd/sdk/sdktest"
)

var (
	counterKey = abi.ResourceKey{Domain: "counter", Key: "c", Mode: abi.Exclusive}
	held       sdk.Lease
)

func init() {
	// Lease: payload "take" acquires counterKey and keeps the lease in
	// held; "write" puts under held's fence; "renew"/"release" act on it.
	sdk.OnAck("Lease", func(m sdk.Message) error {
		switch string(m.Payload) {
		case "take":
			l, err := sdk.AcquireLeaseWith(sdk.LeaseRequest{Keys: []abi.ResourceKey{counterKey}, TTL: time.Second, Owner: "test", IdempotencyKey: "k1"})
			if err != nil {
				return err
			}
			held = l
			return nil
		case "take-other":
			// The same idempotency key for another key: refused.
			_, err := sdk.AcquireLeaseWith(sdk.LeaseRequest{Keys: []abi.ResourceKey{{Domain: "counter", Key: "d", Mode: abi.Exclusive}},
				TTL: time.Second, Owner: "test", IdempotencyKey: "k1"})
			return err
		case "write":
			f, _ := held.FenceOf("counter", "c")
			return sdk.KVPutFenced("value", []byte("x"), counterKey, f)
		case "renew":
			return held.Renew(0)
		case "release":
			return held.Release()
		}
		return sdk.Permanent(errors.New("unknown op"))
	})
	sdk.OnValidate("Lease", func(m sdk.Message) error {
		f, _ := held.FenceOf("counter", "c")
		if err := sdk.CheckFence(counterKey, f); err != nil {
			return err
		}
		_, err := sdk.AcquireLease([]abi.ResourceKey{counterKey}, 0)
		return err
	})
}

func TestLeases(t *testing.T) {
	h := sdktest.New(t)
	now := time.Unix(1000, 0)
	h.SetNow(func() time.Time { return now })

	if res := h.Ack("Lease", []byte("take")); !res.OK() {
		t.Fatal(res)
	}
	first := held
	if f, ok := first.FenceOf("counter", "c"); !ok || f != 1 {
		t.Fatalf("fence %d %v", f, ok)
	}
	if got := h.Leases(); len(got) != 1 || got[0] != "test counter:c(exclusive)#1" {
		t.Fatalf("leases %v", got)
	}
	// Idempotent retry returns the same grant.
	if res := h.Ack("Lease", []byte("take")); !res.OK() || held.ID != first.ID {
		t.Fatalf("retry: %v, %s vs %s", res, held.ID, first.ID)
	}
	// The same idempotency key for a different request: invalid, as in
	// hostd, and nothing is acquired.
	if res := h.Ack("Lease", []byte("take-other")); res.OK() || !strings.Contains(res.Message, "different request") {
		t.Fatalf("idempotency key reused: %v", res)
	}
	if got := h.Leases(); len(got) != 1 {
		t.Fatalf("leases after the refused retry %v", got)
	}
	// Validators may check fences but not acquire.
	if res := h.Validate("Lease", nil); !strings.Contains(res.Message, "ack callbacks only") {
		t.Fatalf("validator acquire: %v", res)
	}
	if res := h.Ack("Lease", []byte("write")); !res.OK() {
		t.Fatal(res)
	}
	// After expiry someone else gets fence 2; the old fence is stale.
	now = now.Add(2 * time.Second)
	if res := h.Ack("Lease", []byte("renew")); res.OK() || !strings.Contains(res.Message, "expired") {
		t.Fatalf("renew after expiry: %v", res)
	}
	old := held
	held = sdk.Lease{}
	if res := h.Ack("Lease", []byte("take")); !res.OK() {
		t.Fatal(res)
	}
	if f, _ := held.FenceOf("counter", "c"); f != 2 {
		t.Fatalf("second fence %d", f)
	}
	second := held
	held = old
	if res := h.Ack("Lease", []byte("write")); res.OK() || !strings.Contains(res.Message, "not current") {
		t.Fatalf("stale write: %v", res)
	}
	if res := h.Ack("Lease", []byte("release")); res.OK() {
		t.Fatalf("release of a lost lease: %v", res)
	}
	held = second
	if res := h.Ack("Lease", []byte("release")); !res.OK() {
		t.Fatal(res)
	}
	if res := h.Ack("Lease", []byte("release")); !res.OK() {
		t.Fatalf("second release is a no-op: %v", res)
	}
	if got := h.Leases(); len(got) != 0 {
		t.Fatalf("leases after release: %v", got)
	}
	if v, _ := h.KV().Get("value"); string(v) != "x" {
		t.Fatalf("fenced write: %q", v)
	}
}

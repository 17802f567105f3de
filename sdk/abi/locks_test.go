package abi

import (
	"bytes"
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func sampleLease() Lease {
	return Lease{ID: "17", Token: "tok", TTLMillis: 30000, ExpiresAt: 1700000000123456789,
		Keys: []FencedKey{{Key: ResourceKey{Domain: "service", Key: "api", Mode: Exclusive}, Fence: 17}}}
}

func TestLeaseRoundTrip(t *testing.T) {
	q := LeaseRequest{Keys: []ResourceKey{{"a", "b", Shared}, {"c", "d", Exclusive}}, TTLMillis: 5000, Owner: "o", IdempotencyKey: "i"}
	got, err := DecodeLeaseRequest(AppendLeaseRequest(nil, &q))
	if err != nil || !cmp.Equal(got, q) {
		t.Fatalf("request: %v %s", err, cmp.Diff(q, got))
	}
	l := sampleLease()
	gl, err := DecodeLease(AppendLease(nil, &l))
	if err != nil || !cmp.Equal(gl, l) {
		t.Fatalf("lease: %v %s", err, cmp.Diff(l, gl))
	}
}

func TestLeaseRequestLayout(t *testing.T) {
	q := LeaseRequest{Keys: []ResourceKey{{"d", "k", Exclusive}}, TTLMillis: 2, Owner: "o"}
	want := []byte{1, 7, 1, 0, 0, 0, 1, 0, 0, 0, 'd', 1, 0, 0, 0, 'k', 1,
		2, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 'o', 0, 0, 0, 0}
	if got := AppendLeaseRequest(nil, &q); !bytes.Equal(got, want) {
		t.Fatalf("got % x\nwant % x", got, want)
	}
}

func TestLeaseDecodeRejects(t *testing.T) {
	bad := AppendLeaseRequest(nil, &LeaseRequest{Keys: []ResourceKey{{"", "k", Shared}}})
	if _, err := DecodeLeaseRequest(bad); !errors.Is(err, ErrMalformed) {
		t.Fatalf("empty domain: %v", err)
	}
	l := sampleLease()
	b := AppendLease(nil, &l)
	if _, err := DecodeLease(b[:len(b)-1]); !errors.Is(err, ErrMalformed) {
		t.Fatalf("truncated: %v", err)
	}
	if _, err := DecodeLease(append(b, 0)); !errors.Is(err, ErrMalformed) {
		t.Fatalf("trailing: %v", err)
	}
	if StatusLocked.String() != "locked" || StatusInvalidKey.String() != "invalid_key" {
		t.Fatal("status names")
	}
}

func FuzzDecodeLeaseRequest(f *testing.F) {
	f.Add(AppendLeaseRequest(nil, &LeaseRequest{Keys: []ResourceKey{{"a", "b", Exclusive}}, TTLMillis: 1, Owner: "o"}))
	f.Add([]byte{1, 7, 0, 0, 0, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		q, err := DecodeLeaseRequest(b)
		if err != nil {
			return
		}
		if !bytes.Equal(AppendLeaseRequest(nil, &q), b) {
			t.Fatal("not canonical")
		}
	})
}

func FuzzDecodeLease(f *testing.F) {
	l := sampleLease()
	f.Add(AppendLease(nil, &l))
	f.Add([]byte{1, 8})
	f.Fuzz(func(t *testing.T, b []byte) {
		l, err := DecodeLease(b)
		if err != nil {
			return
		}
		if !bytes.Equal(AppendLease(nil, &l), b) {
			t.Fatal("not canonical")
		}
	})
}

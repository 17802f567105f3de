package main

import (
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/hostd-dev/hostd/sdk/abi"
	"github.com/hostd-dev/hostd/sdk/sdktest"
)

func TestSequence(t *testing.T) {
	h := sdktest.New(t)
	for i, s := range sequence {
		if res := h.Validate(s.typ, []byte(s.payload)); res.Code != s.validate {
			t.Fatalf("step %d %s %s: validate = %v, want %s", i, s.typ, s.payload, res, s.validate)
		}
		if res := h.Ack(s.typ, []byte(s.payload)); res.Code != s.ack {
			t.Fatalf("step %d %s %s: ack = %v, want %s", i, s.typ, s.payload, res, s.ack)
		}
	}
	if d := cmp.Diff(wantFinal, h.KV().Map()); d != "" {
		t.Fatalf("final KV (-want +got):\n%s", d)
	}
	if !h.Logged("collections: applied type=CreateCollection") {
		t.Fatalf("no applied log: %v", h.Logs())
	}
}

func TestValidatorMessages(t *testing.T) {
	h := sdktest.New(t)
	h.Ack(TypeCreateDatabase, []byte(`{"name":"shop"}`))
	for _, tc := range []struct{ typ, payload, want string }{
		{TypeCreateDatabase, `{"name":"shop"}`, `collections: conflict: database "shop" already exists`},
		{TypeDropCollection, `{"db":"shop","name":"c"}`, `collections: conflict: collection shop.c does not exist`},
		{TypeCreateCollection, `{"db":"nodb","name":"c"}`, `collections: conflict: database "nodb" does not exist`},
		{TypeCreateDatabase, `{"name":""}`, `collections: invalid message: database name is empty`},
		{TypeRenameCollection, `{"db":"shop","name":"c","new_name":"c"}`, `collections: invalid message: rename shop.c to itself`},
	} {
		res := h.Validate(tc.typ, []byte(tc.payload))
		if !res.Permanent() || res.Message != tc.want {
			t.Errorf("%s %s: got %v, want permanent %q", tc.typ, tc.payload, res, tc.want)
		}
	}
}

func TestResourceKeys(t *testing.T) {
	h := sdktest.New(t)
	db := func(k string, m abi.LockMode) abi.ResourceKey {
		return abi.ResourceKey{Domain: "database", Key: k, Mode: m}
	}
	coll := func(k string, m abi.LockMode) abi.ResourceKey {
		return abi.ResourceKey{Domain: "collection", Key: k, Mode: m}
	}
	for _, tc := range []struct {
		typ, payload string
		want         []abi.ResourceKey
	}{
		{TypeCreateDatabase, `{"name":"d"}`, []abi.ResourceKey{db("d", abi.Exclusive)}},
		{TypeDropDatabase, `{"name":"d"}`, []abi.ResourceKey{db("d", abi.Exclusive)}},
		{TypeCreateCollection, `{"db":"d","name":"c"}`, []abi.ResourceKey{db("d", abi.Shared), coll("d.c", abi.Exclusive)}},
		{TypeDropCollection, `{"db":"d","name":"c"}`, []abi.ResourceKey{db("d", abi.Shared), coll("d.c", abi.Exclusive)}},
		{TypeRenameCollection, `{"db":"d","name":"c","new_name":"e"}`, []abi.ResourceKey{db("d", abi.Shared), coll("d.c", abi.Exclusive), coll("d.e", abi.Exclusive)}},
		{TypeRenameCollection, `{"db":"d","name":"c","new_db":"f","new_name":"e"}`, []abi.ResourceKey{db("d", abi.Shared), db("f", abi.Shared), coll("d.c", abi.Exclusive), coll("f.e", abi.Exclusive)}},
	} {
		keys, res := h.ResourceKeys(tc.typ, []byte(tc.payload))
		if !res.OK() {
			t.Fatalf("%s: %v", tc.typ, res)
		}
		if d := cmp.Diff(tc.want, keys); d != "" {
			t.Errorf("%s %s (-want +got):\n%s", tc.typ, tc.payload, d)
		}
	}
	if _, res := h.ResourceKeys(TypeCreateCollection, []byte(`{"db":"d"}`)); !res.Permanent() {
		t.Fatalf("missing name: %v", res)
	}
}

func TestCorruptRecordIsPermanent(t *testing.T) {
	h := sdktest.New(t)
	h.KV().Put("seq", []byte("banana"))
	res := h.Ack(TypeCreateDatabase, []byte(`{"name":"d"}`))
	if !res.Permanent() || !strings.Contains(res.Message, "corrupt record") || h.KV().Len() != 1 {
		t.Fatalf("%v, kv %v", res, h.KV().Map())
	}
}

// memStore is a plain map Store, for testing the registry's logic directly.
type memStore map[string]string

func (m memStore) Get(k string) ([]byte, bool, error) { v, ok := m[k]; return []byte(v), ok, nil }
func (m memStore) Put(k string, v []byte) error       { m[k] = string(v); return nil }
func (m memStore) Delete(k string) error              { delete(m, k); return nil }

// TestIDsAreUnique creates and drops collections in a loop: ids never repeat.
func TestIDsAreUnique(t *testing.T) {
	s := memStore{}
	r := Registry{s}
	if err := r.Apply(TypeCreateDatabase, []byte(`{"name":"d"}`)); err != nil {
		t.Fatal(err)
	}
	seen := map[uint64]bool{}
	for i := 0; i < 50; i++ {
		if err := r.Apply(TypeCreateCollection, []byte(`{"db":"d","name":"c"}`)); err != nil {
			t.Fatal(err)
		}
		c, ok, err := r.Collection("d", "c")
		if err != nil || !ok || seen[c.ID] {
			t.Fatalf("iteration %d: %+v %v %v (seen %v)", i, c, ok, err, seen[c.ID])
		}
		seen[c.ID] = true
		if err := r.Apply(TypeDropCollection, []byte(`{"db":"d","name":"c"}`)); err != nil {
			t.Fatal(err)
		}
	}
	if err := r.Apply(TypeDropDatabase, []byte(`{"name":"d"}`)); err != nil {
		t.Fatalf("drop emptied database: %v (kv %v)", err, s)
	}
}

// FuzzApply feeds arbitrary payloads to every message type: no panic, and
// a rejected message leaves the store unchanged.
func FuzzApply(f *testing.F) {
	for _, s := range sequence {
		f.Add(s.typ, []byte(s.payload))
	}
	f.Fuzz(func(t *testing.T, typ string, payload []byte) {
		s := memStore{}
		r := Registry{s}
		_ = r.Apply(TypeCreateDatabase, []byte(`{"name":"d"}`))
		_ = r.Apply(TypeCreateCollection, []byte(`{"db":"d","name":"c"}`))
		before := fmt.Sprint(s)
		if err := r.Validate(typ, payload); err != nil {
			if fmt.Sprint(s) != before {
				t.Fatal("validate changed the store")
			}
		}
		_, _ = ResourceKeys(typ, payload)
		if err := r.Apply(typ, payload); err != nil && fmt.Sprint(s) != before {
			// Apply checks everything before its first write.
			t.Fatalf("rejected %s %q changed the store: %v", typ, payload, err)
		}
	})
}

package abi

import (
	"bytes"
	"testing"
)

// Every decoder must reject or accept arbitrary bytes without panicking,
// and what it accepts must re-encode to the same bytes (the encoding is
// canonical except for map order, which the encoder sorts).

func FuzzDecodeMessage(f *testing.F) {
	m := sampleMessage()
	f.Add(AppendMessage(nil, &m))
	f.Add(AppendMessage(nil, &Message{}))
	f.Add([]byte{1, 1, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := DecodeMessage(b)
		if err != nil {
			return
		}
		again, err := DecodeMessage(AppendMessage(nil, &m))
		if err != nil {
			t.Fatalf("re-decode: %v", err)
		}
		if !bytes.Equal(AppendMessage(nil, &again), AppendMessage(nil, &m)) {
			t.Fatal("not stable")
		}
	})
}

func FuzzDecodePolicyInput(f *testing.F) {
	in := PolicyInput{Operation: "create", Topic: "t", Queues: 2, Current: []Assignment{{0, "a"}},
		Brokers: []Broker{{Name: "a", Labels: map[string]string{"zone": "1"}}}}
	f.Add(AppendPolicyInput(nil, &in))
	f.Fuzz(func(t *testing.T, b []byte) {
		in, err := DecodePolicyInput(b)
		if err != nil {
			return
		}
		if _, err := DecodePolicyInput(AppendPolicyInput(nil, &in)); err != nil {
			t.Fatal(err)
		}
	})
}

func FuzzDecodePolicyOutput(f *testing.F) {
	f.Add(AppendPolicyOutput(nil, &PolicyOutput{Assignments: []Assignment{{1, "b"}}}))
	f.Fuzz(func(t *testing.T, b []byte) {
		out, err := DecodePolicyOutput(b)
		if err != nil {
			return
		}
		if !bytes.Equal(AppendPolicyOutput(nil, &out), b) {
			t.Fatal("not canonical")
		}
	})
}

func FuzzDecodeResourceKeys(f *testing.F) {
	f.Add(AppendResourceKeys(nil, []ResourceKey{{"collection", "d.c", Exclusive}}))
	f.Fuzz(func(t *testing.T, b []byte) {
		keys, err := DecodeResourceKeys(b)
		if err != nil {
			return
		}
		if !bytes.Equal(AppendResourceKeys(nil, keys), b) {
			t.Fatal("not canonical")
		}
	})
}

func FuzzDecodeKVList(f *testing.F) {
	f.Add(AppendKVList(nil, &KVList{Entries: []KVPair{{[]byte("a"), []byte("b")}}, More: true}))
	f.Fuzz(func(t *testing.T, b []byte) {
		l, err := DecodeKVList(b)
		if err != nil {
			return
		}
		if !bytes.Equal(AppendKVList(nil, &l), b) {
			t.Fatal("not canonical")
		}
	})
}

func FuzzDecodeAttrs(f *testing.F) {
	f.Add(AppendAttrs(nil, []Attr{{"k", "v"}}))
	f.Fuzz(func(t *testing.T, b []byte) {
		a, err := DecodeAttrs(b)
		if err != nil {
			return
		}
		if !bytes.Equal(AppendAttrs(nil, a), b) {
			t.Fatal("not canonical")
		}
	})
}

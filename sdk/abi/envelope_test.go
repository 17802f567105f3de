package abi

import (
	"bytes"
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func sampleMessage() Message {
	return Message{
		ID:         42,
		Type:       "CreateCollection",
		Payload:    []byte(`{"db":"d","name":"c"}`),
		Properties: map[string]string{"b": "2", "a": "1"},
		VChannels: []VChannel{
			{Name: "_control/0", Appended: true, LogicOffset: 7, PhysicalQueue: "b1/3", TimeTick: 99},
			{Name: "t/1"},
		},
		Attempt:     3,
		TraceParent: "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
	}
}

func TestMessageRoundTrip(t *testing.T) {
	for _, m := range []Message{{}, sampleMessage(), {Type: "x", Payload: make([]byte, 70000)}} {
		b := AppendMessage(nil, &m)
		got, err := DecodeMessage(b)
		if err != nil {
			t.Fatal(err)
		}
		if d := cmp.Diff(m, got); d != "" {
			t.Fatalf("round trip (-want +got):\n%s", d)
		}
		if !bytes.Equal(AppendMessage(nil, &got), b) {
			t.Fatal("re-encoding differs")
		}
	}
}

// The byte layout is the contract for non-Go plugins: pin it.
func TestMessageLayout(t *testing.T) {
	m := Message{ID: 1, Type: "T", Payload: []byte{0xAA}, Properties: map[string]string{"k": "v"},
		VChannels: []VChannel{{Name: "c", Appended: true, LogicOffset: 2, PhysicalQueue: "p", TimeTick: 3}},
		Attempt:   4, TraceParent: "tp"}
	want := []byte{
		1, 1, // version, record type
		1, 0, 0, 0, 0, 0, 0, 0, // id
		1, 0, 0, 0, 'T', // type
		1, 0, 0, 0, 0xAA, // payload
		1, 0, 0, 0, 1, 0, 0, 0, 'k', 1, 0, 0, 0, 'v', // properties
		1, 0, 0, 0, // vchannels
		1, 0, 0, 0, 'c', 1, 2, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 'p', 3, 0, 0, 0, 0, 0, 0, 0,
		4, 0, 0, 0, // attempt
		2, 0, 0, 0, 't', 'p',
	}
	if got := AppendMessage(nil, &m); !bytes.Equal(got, want) {
		t.Fatalf("layout\n got %v\nwant %v", got, want)
	}
}

func TestOtherRoundTrips(t *testing.T) {
	in := PolicyInput{Operation: "remap", Topic: "t", Queues: 4,
		Current: []Assignment{{0, "a"}, {1, "b"}},
		Brokers: []Broker{{Name: "a", Load: 2, Labels: map[string]string{"zone": "z1"}}, {Name: "b"}}}
	gotIn, err := DecodePolicyInput(AppendPolicyInput(nil, &in))
	if err != nil || !cmp.Equal(in, gotIn) {
		t.Fatalf("policy input: %v %s", err, cmp.Diff(in, gotIn))
	}
	out := PolicyOutput{Assignments: []Assignment{{3, "x"}}}
	gotOut, err := DecodePolicyOutput(AppendPolicyOutput(nil, &out))
	if err != nil || !cmp.Equal(out, gotOut) {
		t.Fatalf("policy output: %v", err)
	}
	keys := []ResourceKey{{DomainCollection, "d.c", Exclusive}, {DomainDatabase, "d", Shared}}
	gotKeys, err := DecodeResourceKeys(AppendResourceKeys(nil, keys))
	if err != nil || !cmp.Equal(keys, gotKeys) {
		t.Fatalf("keys: %v", err)
	}
	l := KVList{Entries: []KVPair{{[]byte("k"), []byte("v")}, {[]byte("k2"), []byte{}}}, More: true}
	gotL, err := DecodeKVList(AppendKVList(nil, &l))
	if err != nil || !gotL.More || len(gotL.Entries) != 2 || string(gotL.Entries[0].Value) != "v" {
		t.Fatalf("kvlist: %v %+v", err, gotL)
	}
	attrs := []Attr{{"a", "b"}}
	gotA, err := DecodeAttrs(AppendAttrs(nil, attrs))
	if err != nil || !cmp.Equal(attrs, gotA) {
		t.Fatalf("attrs: %v", err)
	}
}

func TestDecodeRejects(t *testing.T) {
	good := AppendMessage(nil, &Message{Type: "x"})
	cases := map[string][]byte{
		"empty":        nil,
		"bad version":  append([]byte{2}, good[1:]...),
		"wrong record": append([]byte{1, 2}, good[2:]...),
		"truncated":    good[:len(good)-1],
		"trailing":     append(append([]byte{}, good...), 0),
		"huge count":   {1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff},
	}
	for name, b := range cases {
		if _, err := DecodeMessage(b); !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: err = %v, want ErrMalformed", name, err)
		}
	}
	bad := AppendResourceKeys(nil, []ResourceKey{{"d", "k", 7}})
	if _, err := DecodeResourceKeys(bad); !errors.Is(err, ErrMalformed) {
		t.Errorf("bad mode accepted: %v", err)
	}
	if _, err := DecodeResourceKeys(AppendResourceKeys(nil, []ResourceKey{{"", "k", Shared}})); err == nil {
		t.Error("empty domain accepted")
	}
}

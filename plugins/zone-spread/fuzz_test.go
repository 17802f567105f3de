package main

import (
	"testing"

	"github.com/hostd-dev/hostd/sdk/abi"
)

// FuzzSpread feeds arbitrary policy-input envelopes (what the guest
// receives from the host) to the policy: it never panics, and a placement
// it returns covers every queue exactly once with a candidate broker.
func FuzzSpread(f *testing.F) {
	for _, in := range []abi.PolicyInput{
		{Operation: "create", Topic: "t", Queues: 8, Brokers: brokers("a1@a", "a2@a", "b1@b", "c1@c")},
		{Operation: "remap", Topic: "t", Queues: 6, Current: at("a1", "b1", "a1", "b1", "a1", "b1"), Brokers: brokers("a1@a", "b1@b", "c1@c")},
		{Operation: "grow", Topic: "t", Queues: 3, Current: at("x"), Brokers: []abi.Broker{{Name: "x"}}},
	} {
		f.Add(abi.AppendPolicyInput(nil, &in))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		in, err := abi.DecodePolicyInput(b)
		if err != nil {
			return
		}
		out, err := Spread(in, "")
		if err != nil {
			return
		}
		cand := map[string]bool{}
		for _, br := range in.Brokers {
			cand[br.Name] = true
		}
		if len(out.Assignments) != int(in.Queues) {
			t.Fatalf("%d assignments for %d queues", len(out.Assignments), in.Queues)
		}
		for i, a := range out.Assignments {
			if a.Queue != uint32(i) || !cand[a.Broker] {
				t.Fatalf("assignment %d = %+v", i, a)
			}
		}
	})
}

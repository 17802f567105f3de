package main

import (
	"errors"
	"fmt"
	"sort"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/hostd-dev/hostd/sdk/abi"
	"github.com/hostd-dev/hostd/sdk/sdktest"
	"pgregory.net/rapid"
)

func brokers(spec ...string) []abi.Broker {
	// spec: "name@zone"
	var out []abi.Broker
	for _, s := range spec {
		var name, zone string
		for i := range s {
			if s[i] == '@' {
				name, zone = s[:i], s[i+1:]
			}
		}
		out = append(out, abi.Broker{Name: name, Labels: map[string]string{"zone": zone}})
	}
	return out
}

// at returns assignments of queues 0, 1, ... to the named brokers.
func at(brokers ...string) []abi.Assignment {
	out := make([]abi.Assignment, len(brokers))
	for i, b := range brokers {
		out[i] = abi.Assignment{Queue: uint32(i), Broker: b}
	}
	return out
}

func countBy(out abi.PolicyOutput, in abi.PolicyInput) (perBroker, perZone map[string]int) {
	zoneOf := map[string]string{}
	for _, b := range in.Brokers {
		zoneOf[b.Name] = b.Labels["zone"]
	}
	perBroker, perZone = map[string]int{}, map[string]int{}
	for _, a := range out.Assignments {
		perBroker[a.Broker]++
		perZone[zoneOf[a.Broker]]++
	}
	return
}

func TestCreateSpreadsAcrossZones(t *testing.T) {
	in := abi.PolicyInput{Operation: "create", Topic: "t", Queues: 8,
		Brokers: brokers("a1@a", "a2@a", "b1@b", "c1@c")}
	out, err := Spread(in, "")
	if err != nil {
		t.Fatal(err)
	}
	_, perZone := countBy(out, in)
	if d := cmp.Diff(map[string]int{"a": 3, "b": 3, "c": 2}, perZone); d != "" {
		t.Fatalf("zones (-want +got):\n%s", d)
	}
	want := []string{"a1", "b1", "a1", "b1", "c1", "a2", "b1", "c1"}
	for i, a := range out.Assignments {
		if a.Queue != uint32(i) || a.Broker != want[i] {
			t.Fatalf("assignment %d = %+v, want %s (all: %v)", i, a, want[i], out.Assignments)
		}
	}
}

func TestRemapKeepsQueuesWhereQuotasAllow(t *testing.T) {
	// 6 queues on zones a,b; zone c is added: 2 per zone, and only the
	// surplus of each old zone moves to c.
	cur := at("a1", "b1", "a1", "b1", "a1", "b1")
	in := abi.PolicyInput{Operation: "remap", Topic: "t", Queues: 6, Current: cur,
		Brokers: brokers("a1@a", "b1@b", "c1@c")}
	out, err := Spread(in, "")
	if err != nil {
		t.Fatal(err)
	}
	want := at("a1", "b1", "a1", "b1", "c1", "c1")
	if d := cmp.Diff(want, out.Assignments); d != "" {
		t.Fatalf("(-want +got):\n%s", d)
	}
	// A broker gone: its queues move, the others stay.
	in = abi.PolicyInput{Operation: "remap", Topic: "t", Queues: 6, Current: want,
		Brokers: brokers("a1@a", "a2@a", "b1@b")}
	out, err = Spread(in, "")
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range out.Assignments[:4] {
		if a != want[a.Queue] {
			t.Fatalf("queue %d moved without need: %v", a.Queue, out.Assignments)
		}
	}
	if out.Assignments[4].Broker != "a2" || out.Assignments[5].Broker != "b1" {
		t.Fatalf("moved queues: %v", out.Assignments)
	}
}

func TestGrowAddsQueues(t *testing.T) {
	cur := at("a1", "b1")
	in := abi.PolicyInput{Operation: "grow", Topic: "t", Queues: 4, Current: cur, Brokers: brokers("a1@a", "b1@b")}
	out, err := Spread(in, "")
	if err != nil {
		t.Fatal(err)
	}
	want := at("a1", "b1", "a1", "b1")
	if d := cmp.Diff(want, out.Assignments); d != "" {
		t.Fatalf("(-want +got):\n%s", d)
	}
}

func TestBadInput(t *testing.T) {
	for name, in := range map[string]abi.PolicyInput{
		"no brokers":   {Queues: 1},
		"zero queues":  {Brokers: brokers("a@a")},
		"too many":     {Queues: MaxQueues + 1, Brokers: brokers("a@a")},
		"no label":     {Queues: 1, Brokers: []abi.Broker{{Name: "x"}}},
		"duplicate":    {Queues: 1, Brokers: brokers("a@a", "a@b")},
		"empty broker": {Queues: 1, Brokers: brokers("@a")},
	} {
		if _, err := Spread(in, ""); !errors.Is(err, ErrInput) {
			t.Errorf("%s: err = %v", name, err)
		}
	}
}

// TestSpreadProperties checks the invariants on random inputs: every queue
// placed once on a candidate; zone and broker shares differ by at most one
// (brokers within a zone); deterministic; a queue on a surviving broker
// stays unless its broker or zone was over its share.
func TestSpreadProperties(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		nb := rapid.IntRange(1, 8).Draw(t, "brokers")
		nz := rapid.IntRange(1, nb).Draw(t, "zones")
		var in abi.PolicyInput
		in.Queues = uint32(rapid.IntRange(1, 40).Draw(t, "queues"))
		for i := 0; i < nb; i++ {
			in.Brokers = append(in.Brokers, abi.Broker{Name: fmt.Sprintf("b%d", i),
				Load:   uint32(rapid.IntRange(0, 5).Draw(t, "load")),
				Labels: map[string]string{"zone": fmt.Sprintf("z%d", i%nz)}})
		}
		ncur := rapid.IntRange(0, int(in.Queues)+3).Draw(t, "current")
		for q := 0; q < ncur; q++ {
			in.Current = append(in.Current, abi.Assignment{Queue: uint32(q),
				Broker: fmt.Sprintf("b%d", rapid.IntRange(0, nb+1).Draw(t, "on"))})
		}
		out, err := Spread(in, "zone")
		if err != nil {
			t.Fatal(err)
		}
		again, _ := Spread(in, "zone")
		if !cmp.Equal(out, again) {
			t.Fatal("not deterministic")
		}
		if len(out.Assignments) != int(in.Queues) {
			t.Fatalf("%d assignments for %d queues", len(out.Assignments), in.Queues)
		}
		perBroker, perZone := countBy(out, in)
		zs := []int{}
		for z := 0; z < nz; z++ {
			zs = append(zs, perZone[fmt.Sprintf("z%d", z)])
		}
		sort.Ints(zs)
		if zs[len(zs)-1]-zs[0] > 1 {
			t.Fatalf("zone shares %v", zs)
		}
		for z := 0; z < nz; z++ {
			var bs []int
			for i := z; i < nb; i += nz {
				bs = append(bs, perBroker[fmt.Sprintf("b%d", i)])
			}
			sort.Ints(bs)
			if bs[len(bs)-1]-bs[0] > 1 {
				t.Fatalf("zone z%d broker shares %v", z, bs)
			}
		}
		// Minimal movement: the number of kept queues equals the most
		// that the shares allow, sum over brokers of min(cur, quota).
		cur := map[uint32]string{}
		curOn := map[string]int{}
		for _, a := range in.Current {
			if _, dup := cur[a.Queue]; dup || a.Queue >= in.Queues {
				continue
			}
			cur[a.Queue] = a.Broker
			curOn[a.Broker]++
		}
		kept, maxKeep := 0, 0
		for i, a := range out.Assignments {
			if a.Queue != uint32(i) {
				t.Fatalf("assignment %d has queue %d", i, a.Queue)
			}
			if cur[a.Queue] == a.Broker {
				kept++
			}
		}
		for b, n := range perBroker {
			maxKeep += min(n, curOn[b])
		}
		if kept != maxKeep {
			t.Fatalf("kept %d of a possible %d (current %v, out %v)", kept, maxKeep, in.Current, out.Assignments)
		}
	})
}

func TestPolicyThroughSDK(t *testing.T) {
	h := sdktest.New(t)
	in := abi.PolicyInput{Operation: "create", Topic: "t", Queues: 4,
		Brokers: []abi.Broker{{Name: "x", Labels: map[string]string{"rack": "r1"}}, {Name: "y", Labels: map[string]string{"rack": "r2"}}}}
	if _, res := h.Policy(PolicyName, in); !res.Permanent() {
		t.Fatalf("without label config: %v", res)
	}
	h.SetConfig("label", "rack")
	out, res := h.Policy(PolicyName, in)
	if !res.OK() {
		t.Fatal(res)
	}
	if d := cmp.Diff(at("x", "y", "x", "y"), out.Assignments); d != "" {
		t.Fatal(d)
	}
	if a := h.SpanAttrs(); len(a) != 1 || a[0] != (abi.Attr{Key: "zone_spread.moved", Value: "0"}) {
		t.Fatalf("attrs %v", a)
	}
}

package main

import (
	"errors"
	"fmt"
	"sort"

	"github.com/hostd-dev/hostd/sdk/abi"
)

// DefaultLabel is the broker label that names its zone, unless the plugin
// config key "label" says otherwise.
const DefaultLabel = "zone"

// ErrInput is wrapped by every error caused by the policy input (permanent:
// the same input gives the same error).
var ErrInput = errors.New("zone-spread: bad input")

// MaxQueues bounds the number of logic queues the policy accepts, so that a
// bad input cannot make the guest allocate without limit.
const MaxQueues = 1 << 16

type broker struct {
	name   string
	zone   string
	load   uint32 // queues on it outside this topic, from the input
	quota  int
	placed int
	cur    int // queues of this topic currently on it
}

type zone struct {
	name    string
	brokers []*broker
	quota   int
	placed  int
	cur     int
}

// Spread computes a placement of in.Queues logic queues over in.Brokers such
// that:
//
//   - every zone (value of the label on a broker) gets floor(Q/Z) or
//     ceil(Q/Z) queues, and inside a zone every broker gets floor or ceil
//     of the zone's share;
//   - a queue in in.Current stays where it is if its broker is still a
//     candidate and that broker's and zone's quotas allow it;
//   - the result depends only on the input (no randomness, no map order):
//     the extra "ceil" slots go to zones and brokers that already hold more
//     of the topic's queues (fewer moves), then to the lower Load, then to
//     the smaller name.
//
// Errors wrap ErrInput: no brokers, a broker without the zone label or
// listed twice, zero or too many queues.
func Spread(in abi.PolicyInput, label string) (abi.PolicyOutput, error) {
	if label == "" {
		label = DefaultLabel
	}
	q := int(in.Queues)
	if q == 0 || q > MaxQueues {
		return abi.PolicyOutput{}, fmt.Errorf("%w: topic %q: %d queues (want 1..%d)", ErrInput, in.Topic, in.Queues, MaxQueues)
	}
	if len(in.Brokers) == 0 {
		return abi.PolicyOutput{}, fmt.Errorf("%w: topic %q: no candidate brokers", ErrInput, in.Topic)
	}

	byName := make(map[string]*broker, len(in.Brokers))
	zones := map[string]*zone{}
	for _, b := range in.Brokers {
		if b.Name == "" {
			return abi.PolicyOutput{}, fmt.Errorf("%w: a broker has an empty name", ErrInput)
		}
		if _, dup := byName[b.Name]; dup {
			return abi.PolicyOutput{}, fmt.Errorf("%w: broker %q listed twice", ErrInput, b.Name)
		}
		zn := b.Labels[label]
		if zn == "" {
			return abi.PolicyOutput{}, fmt.Errorf("%w: broker %q has no %q label", ErrInput, b.Name, label)
		}
		br := &broker{name: b.Name, zone: zn, load: b.Load}
		byName[b.Name] = br
		z := zones[zn]
		if z == nil {
			z = &zone{name: zn}
			zones[zn] = z
		}
		z.brokers = append(z.brokers, br)
	}

	// Current placement of this topic's surviving queues (queue numbers
	// below Q on a broker that is still a candidate). A queue listed twice
	// keeps its first entry.
	current := make([]*broker, q)
	for _, a := range in.Current {
		if int64(a.Queue) >= int64(q) || current[a.Queue] != nil {
			continue
		}
		if br := byName[a.Broker]; br != nil {
			current[a.Queue] = br
			br.cur++
			zones[br.zone].cur++
		}
	}

	// Zone quotas: the extra slots go to the zones holding more already.
	zl := make([]*zone, 0, len(zones))
	for _, z := range zones {
		zl = append(zl, z)
	}
	sort.Slice(zl, func(i, j int) bool {
		if zl[i].cur != zl[j].cur {
			return zl[i].cur > zl[j].cur
		}
		return zl[i].name < zl[j].name
	})
	for i, z := range zl {
		z.quota = q / len(zl)
		if i < q%len(zl) {
			z.quota++
		}
		// Broker quotas inside the zone, same rule, then lower load.
		bs := z.brokers
		sort.Slice(bs, func(i, j int) bool {
			if bs[i].cur != bs[j].cur {
				return bs[i].cur > bs[j].cur
			}
			if bs[i].load != bs[j].load {
				return bs[i].load < bs[j].load
			}
			return bs[i].name < bs[j].name
		})
		for k, b := range bs {
			b.quota = z.quota / len(bs)
			if k < z.quota%len(bs) {
				b.quota++
			}
		}
	}

	out := make([]abi.Assignment, q)
	placed := make([]bool, q)
	// Keep what fits, in queue order.
	for i, br := range current {
		if br == nil || br.placed >= br.quota {
			continue
		}
		br.placed++
		zones[br.zone].placed++
		out[i] = abi.Assignment{Queue: uint32(i), Broker: br.name}
		placed[i] = true
	}
	// Place the rest: the zone with the most free quota, then its broker
	// with the most free quota (ties: smaller name), so consecutive queues
	// alternate between zones.
	for i := range out {
		if placed[i] {
			continue
		}
		var bz *zone
		for _, z := range zl {
			if z.placed < z.quota && (bz == nil || z.quota-z.placed > bz.quota-bz.placed ||
				(z.quota-z.placed == bz.quota-bz.placed && z.name < bz.name)) {
				bz = z
			}
		}
		var best *broker
		if bz != nil {
			for _, b := range bz.brokers {
				if b.placed < b.quota && (best == nil || b.quota-b.placed > best.quota-best.placed ||
					(b.quota-b.placed == best.quota-best.placed && b.name < best.name)) {
					best = b
				}
			}
		}
		if best == nil { // cannot happen: broker quotas sum to zone quotas sum to q
			return abi.PolicyOutput{}, fmt.Errorf("zone-spread: internal error: no free slot for queue %d", i)
		}
		best.placed++
		zones[best.zone].placed++
		out[i] = abi.Assignment{Queue: uint32(i), Broker: best.name}
	}
	return abi.PolicyOutput{Assignments: out}, nil
}

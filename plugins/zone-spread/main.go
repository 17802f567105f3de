// Command zone-spread is a first-party hostd plugin providing the mapping
// policy "zone-spread": it places a static topic's logic queues on brokers
// so that every zone (a broker label, "zone" by default) gets an equal
// share, brokers inside a zone get equal shares, and queues that are
// already placed stay where they are whenever the shares allow it. The
// result is deterministic. See README.md and Spread.
//
// Plugin config: label (the broker label naming the zone, default "zone").
package main

import (
	"errors"
	"strconv"

	"github.com/hostd-dev/hostd/sdk"
)

// PolicyName is the name the policy is registered under.
const PolicyName = "zone-spread"

func init() {
	sdk.Policy(PolicyName, policy)
}

func policy(in sdk.PolicyInput) (sdk.PolicyOutput, error) {
	label, _ := sdk.Config("label")
	out, err := Spread(in, label)
	if err != nil {
		if errors.Is(err, ErrInput) {
			return out, sdk.Permanent(err)
		}
		return out, err
	}
	moved := 0
	was := make(map[uint32]string, len(in.Current))
	for _, a := range in.Current {
		was[a.Queue] = a.Broker
	}
	for _, a := range out.Assignments {
		if b, ok := was[a.Queue]; ok && b != a.Broker {
			moved++
		}
	}
	sdk.SpanAttr("zone_spread.moved", strconv.Itoa(moved))
	sdk.Debug("zone-spread: placed", "topic", in.Topic, "operation", in.Operation, "queues", in.Queues, "moved", moved)
	return out, nil
}

func main() {}

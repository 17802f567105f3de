package mapping

import (
	"context"
	"fmt"
	"sort"
)

// Operation says why a policy is called.
type Operation string

const (
	OpCreate Operation = "create"
	OpGrow   Operation = "grow"
	OpRemap  Operation = "remap"
)

// BrokerLoad is a candidate broker with its labels and current load (the
// number of leader segments it holds across all topics).
type BrokerLoad struct {
	Name   string            `json:"name"`
	Labels map[string]string `json:"labels,omitempty"`
	Load   int               `json:"load"`
}

// PolicyInput is what a mapping policy decides from.
type PolicyInput struct {
	Topic       string    `json:"topic"`
	TotalQueues int       `json:"total_queues"`
	Operation   Operation `json:"operation"`
	// Current[i] is logic queue i's current broker; "" for a queue being
	// created (create: all; grow: the new ones).
	Current []string     `json:"current"`
	Brokers []BrokerLoad `json:"brokers"` // candidates, sorted by name
}

// Policy assigns each logic queue a broker. It must be a pure function of
// its input. Assign returns one broker name per logic queue.
type Policy interface {
	Assign(ctx context.Context, in PolicyInput) ([]string, error)
}

// PolicySource names who provides a policy, for errors: "built-in" or
// "plugin <name>".
type PolicySource interface {
	Source() string
}

// Balanced is the built-in deterministic policy: counts per broker within
// 1 of each other; a remap keeps every queue it can where it is (a broker
// only gains or only loses queues); new queues go to the least loaded
// brokers (ties by name).
type Balanced struct{}

// BalancedName is the built-in policy's name.
const BalancedName = "balanced"

// Source implements PolicySource.
func (Balanced) Source() string { return "built-in" }

// Assign implements Policy.
func (Balanced) Assign(_ context.Context, in PolicyInput) ([]string, error) {
	if len(in.Brokers) == 0 {
		return nil, fmt.Errorf("no candidate brokers")
	}
	n, k := in.TotalQueues, len(in.Brokers)
	names := make([]string, k)
	idx := map[string]int{}
	for i, b := range in.Brokers {
		names[i] = b.Name
		idx[b.Name] = i
	}
	out := make([]string, n)
	count := make([]int, k)
	// Queues already on a candidate broker, by broker, in queue order.
	held := make([][]int, k)
	for q := 0; q < n; q++ {
		if q < len(in.Current) {
			if i, ok := idx[in.Current[q]]; ok {
				held[i] = append(held[i], q)
			}
		}
	}
	if in.Operation == OpGrow {
		// Existing queues stay; new ones fill the smallest counts.
		for q := 0; q < n; q++ {
			if q < len(in.Current) && in.Current[q] != "" {
				out[q] = in.Current[q]
				if i, ok := idx[out[q]]; ok {
					count[i]++
				}
			}
		}
		for q := 0; q < n; q++ {
			if out[q] != "" {
				continue
			}
			best := 0
			for i := 1; i < k; i++ {
				if count[i] < count[best] {
					best = i
				}
			}
			out[q] = names[best]
			count[best]++
		}
		return out, nil
	}
	// Quotas: n/k each, the n%k extra ones to the brokers holding the most
	// queues now (ties by name), so as many queues as possible stay.
	quota := make([]int, k)
	order := make([]int, k)
	for i := range order {
		order[i] = i
		quota[i] = n / k
	}
	sort.SliceStable(order, func(a, b int) bool { return len(held[order[a]]) > len(held[order[b]]) })
	for j := 0; j < n%k; j++ {
		quota[order[j]]++
	}
	for i := 0; i < k; i++ {
		for _, q := range held[i] {
			if count[i] < quota[i] {
				out[q] = names[i]
				count[i]++
			}
		}
	}
	next := 0
	for q := 0; q < n; q++ {
		if out[q] != "" {
			continue
		}
		for count[next] >= quota[next] {
			next++
		}
		out[q] = names[next]
		count[next]++
	}
	return out, nil
}

// PolicyError is a policy that failed or returned an invalid assignment.
// errors.Is(err, ErrPolicy) holds for it.
type PolicyError struct {
	Policy string // policy name
	Source string // "built-in" or "plugin <name>"
	Err    error
}

func (e *PolicyError) Error() string {
	return fmt.Sprintf("mapping: policy %q (%s): %v", e.Policy, e.Source, e.Err)
}

func (e *PolicyError) Unwrap() error { return e.Err }

// Is reports whether target is ErrPolicy.
func (e *PolicyError) Is(target error) bool { return target == ErrPolicy }

// checkAssignment validates a policy's output: one broker per queue, only
// candidates, and on grow no existing queue moved.
func checkAssignment(in PolicyInput, out []string) error {
	if len(out) != in.TotalQueues {
		return fmt.Errorf("returned %d assignments for %d queues", len(out), in.TotalQueues)
	}
	cand := map[string]bool{}
	for _, b := range in.Brokers {
		cand[b.Name] = true
	}
	for q, b := range out {
		if !cand[b] {
			return fmt.Errorf("assigned queue %d to %q, which is not a candidate broker", q, b)
		}
		if in.Operation == OpGrow && q < len(in.Current) && in.Current[q] != "" && in.Current[q] != b {
			return fmt.Errorf("moved existing queue %d from %q to %q during grow", q, in.Current[q], b)
		}
	}
	return nil
}

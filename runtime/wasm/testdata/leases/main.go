// Command leases is a test plugin for the lease-lock host functions: it
// acquires leases, writes fenced KV in an ack callback, renews, releases
// and checks fences, and reports each host error's sentinel so tests see
// the guest-side view of every status.
package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/hostd-dev/hostd/sdk"
	"github.com/hostd-dev/hostd/sdk/abi"
)

// req is the JSON payload of every message.
type req struct {
	Op    string `json:"op"`
	Lock  string `json:"lock"`
	Key   string `json:"key"`
	Value string `json:"value"`
	Fence uint64 `json:"fence"`
	TTLMs int64  `json:"ttl_ms"`
	// acquire-with and use: a lease request or a grant to act on (maybe
	// another principal's).
	Owner string `json:"owner"`
	Idem  string `json:"idem"`
	ID    string `json:"id"`
	Token string `json:"token"`
}

func lockKey(name string) abi.ResourceKey {
	return abi.ResourceKey{Domain: "job", Key: name, Mode: abi.Exclusive}
}

// sentinel names the SDK error err wraps (for assertions in tests).
func sentinel(err error) string {
	for _, s := range []struct {
		err  error
		name string
	}{{sdk.ErrLocked, "locked"}, {sdk.ErrNotHolder, "not_holder"}, {sdk.ErrExpired, "expired"},
		{sdk.ErrInvalidKey, "invalid_key"}, {sdk.ErrReadOnly, "read_only"}, {sdk.ErrInvalid, "invalid"}} {
		if errors.Is(err, s.err) {
			return s.name
		}
	}
	return "other"
}

func fail(step string, err error) error { return fmt.Errorf("%s: [%s] %w", step, sentinel(err), err) }

func init() {
	sdk.OnAck("Lease", ack)
	sdk.OnValidate("Lease", validate)
}

func decode(m sdk.Message) (req, error) {
	var r req
	if err := m.Decode(&r); err != nil {
		return r, sdk.Permanent(err)
	}
	return r, nil
}

func ack(m sdk.Message) error {
	r, err := decode(m)
	if err != nil {
		return err
	}
	switch r.Op {
	case "fenced":
		// Take the lease, write under its fence, and record the grant so
		// the test can see its fence. The lease is left held.
		l, err := sdk.AcquireLease([]abi.ResourceKey{lockKey(r.Lock)}, time.Duration(r.TTLMs)*time.Millisecond)
		if err != nil {
			return fail("acquire", err)
		}
		fence, ok := l.FenceOf("job", r.Lock)
		if !ok || fence == 0 {
			return sdk.Permanent(fmt.Errorf("lease %+v has no fence for %s", l, r.Lock))
		}
		if err := sdk.KVPutFenced(r.Key, []byte(r.Value), lockKey(r.Lock), fence); err != nil {
			return fail("fenced put", err)
		}
		rec, _ := json.Marshal(map[string]any{"id": l.ID, "fence": fence})
		return sdk.KVPut("lease/"+r.Lock, rec)
	case "put-with-fence":
		// A fenced put with a fence given by the caller (maybe stale).
		if err := sdk.KVPutFenced(r.Key, []byte(r.Value), lockKey(r.Lock), r.Fence); err != nil {
			return fail("fenced put", err)
		}
		return nil
	case "cycle":
		// acquire, renew, release twice, then the fence is stale.
		l, err := sdk.AcquireLeaseWith(sdk.LeaseRequest{Keys: []abi.ResourceKey{lockKey(r.Lock)}, TTL: time.Second, Owner: "cycler"})
		if err != nil {
			return fail("acquire", err)
		}
		fence, _ := l.FenceOf("job", r.Lock)
		if err := sdk.CheckFence(lockKey(r.Lock), fence); err != nil {
			return fail("check live fence", err)
		}
		if err := l.Renew(2 * time.Second); err != nil {
			return fail("renew", err)
		}
		if l.TTL != 2*time.Second {
			return fmt.Errorf("renewed ttl %s, want 2s", l.TTL)
		}
		bad := l
		bad.Token = "wrong"
		if err := bad.Release(); !errors.Is(err, sdk.ErrNotHolder) {
			return fmt.Errorf("release with a wrong token: %v", err)
		}
		if err := l.Release(); err != nil {
			return fail("release", err)
		}
		if err := l.Release(); err != nil {
			return fail("second release", err)
		}
		if err := sdk.CheckFence(lockKey(r.Lock), fence); !errors.Is(err, sdk.ErrNotHolder) {
			return fmt.Errorf("check released fence: %v", err)
		}
		return nil
	case "acquire":
		_, err := sdk.AcquireLease([]abi.ResourceKey{lockKey(r.Lock)}, time.Duration(r.TTLMs)*time.Millisecond)
		if err != nil {
			return fail("acquire", err)
		}
		return nil
	case "acquire-with":
		// Acquire with a chosen owner label and idempotency key; stage
		// what was granted under "got/<lock>" for the test to see.
		l, err := sdk.AcquireLeaseWith(sdk.LeaseRequest{Keys: []abi.ResourceKey{lockKey(r.Lock)},
			TTL: time.Duration(r.TTLMs) * time.Millisecond, Owner: r.Owner, IdempotencyKey: r.Idem})
		if err != nil {
			return fail("acquire", err)
		}
		fence, _ := l.FenceOf("job", r.Lock)
		rec, _ := json.Marshal(map[string]any{"id": l.ID, "token": l.Token, "fence": fence})
		return sdk.KVPut("got/"+r.Lock, rec)
	case "use":
		// Try everything on a grant given by id, token and fence, and
		// stage each outcome under "use/<lock>".
		l := sdk.Lease{ID: r.ID, Token: r.Token}
		out := map[string]string{}
		outcome := func(err error) string {
			if err == nil {
				return "ok"
			}
			return sentinel(err)
		}
		out["renew"] = outcome(l.Renew(time.Minute))
		out["check"] = outcome(sdk.CheckFence(lockKey(r.Lock), r.Fence))
		out["fenced_put"] = outcome(sdk.KVPutFenced("stolen", []byte("x"), lockKey(r.Lock), r.Fence))
		out["release"] = outcome(l.Release())
		rec, _ := json.Marshal(out)
		return sdk.KVPut("use/"+r.Lock, rec)
	case "bad-key":
		_, err := sdk.AcquireLease([]abi.ResourceKey{{Domain: "", Key: "x"}}, time.Second)
		return fail("acquire", err)
	}
	return sdk.Permanent(fmt.Errorf("unknown op %q", r.Op))
}

// validate: validators may check fences but not take leases.
func validate(m sdk.Message) error {
	r, err := decode(m)
	if err != nil {
		return err
	}
	switch r.Op {
	case "check":
		if err := sdk.CheckFence(lockKey(r.Lock), r.Fence); err != nil {
			return fail("check", err)
		}
		return nil
	case "acquire":
		_, err := sdk.AcquireLease([]abi.ResourceKey{lockKey(r.Lock)}, time.Second)
		return fail("acquire", err)
	}
	return nil
}

func main() {}

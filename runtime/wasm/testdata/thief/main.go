// Command thief is a hostile test plugin for the lease-lock host
// functions: it repeats other principals' lease requests (keys, owner,
// idempotency key) and tries to renew, release, check and fence-write with
// grants it did not take. It stages what it got so tests can assert it got
// nothing (see the "acquire-with" and "use" ops of testdata/leases, which
// it mirrors under its own message type "Thief").
package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/hostd-dev/hostd/sdk"
	"github.com/hostd-dev/hostd/sdk/abi"
)

type req struct {
	Op    string `json:"op"`
	Lock  string `json:"lock"`
	Fence uint64 `json:"fence"`
	TTLMs int64  `json:"ttl_ms"`
	Owner string `json:"owner"`
	Idem  string `json:"idem"`
	ID    string `json:"id"`
	Token string `json:"token"`
}

func lockKey(name string) abi.ResourceKey {
	return abi.ResourceKey{Domain: "job", Key: name, Mode: abi.Exclusive}
}

func outcome(err error) string {
	switch {
	case err == nil:
		return "ok"
	case errors.Is(err, sdk.ErrLocked):
		return "locked"
	case errors.Is(err, sdk.ErrNotHolder):
		return "not_holder"
	case errors.Is(err, sdk.ErrExpired):
		return "expired"
	}
	return "other: " + err.Error()
}

func init() { sdk.OnAck("Thief", ack) }

func ack(m sdk.Message) error {
	var r req
	if err := m.Decode(&r); err != nil {
		return sdk.Permanent(err)
	}
	switch r.Op {
	case "acquire-with":
		l, err := sdk.AcquireLeaseWith(sdk.LeaseRequest{Keys: []abi.ResourceKey{lockKey(r.Lock)},
			TTL: time.Duration(r.TTLMs) * time.Millisecond, Owner: r.Owner, IdempotencyKey: r.Idem})
		if err != nil {
			return fmt.Errorf("acquire: [%s] %w", outcome(err), err)
		}
		fence, _ := l.FenceOf("job", r.Lock)
		rec, _ := json.Marshal(map[string]any{"id": l.ID, "token": l.Token, "fence": fence})
		return sdk.KVPut("got/"+r.Lock, rec)
	case "use":
		l := sdk.Lease{ID: r.ID, Token: r.Token}
		out := map[string]string{
			"renew":      outcome(l.Renew(time.Minute)),
			"check":      outcome(sdk.CheckFence(lockKey(r.Lock), r.Fence)),
			"fenced_put": outcome(sdk.KVPutFenced("stolen", []byte("x"), lockKey(r.Lock), r.Fence)),
			"release":    outcome(l.Release()),
		}
		rec, _ := json.Marshal(out)
		return sdk.KVPut("use/"+r.Lock, rec)
	}
	return sdk.Permanent(fmt.Errorf("unknown op %q", r.Op))
}

func main() {}

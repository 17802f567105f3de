// Command tenants is the plugin of examples/ack-callback: it keeps a
// registry of tenants from UpsertTenant broadcasts.
//
//   - The validator rejects an unknown plan (the plans come from the plugin
//     config key "plans", comma-separated) before the broadcast is
//     persisted.
//   - The ack callback runs once every vchannel has acked, and records the
//     tenant with the broadcast id and where each vchannel's copy of the
//     message was appended (logic offset), all in one atomic KV update.
package main

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	"github.com/hostd-dev/hostd/sdk"
)

// MessageType is the broadcast type this plugin handles.
const MessageType = "UpsertTenant"

// Upsert is the payload of an UpsertTenant broadcast.
type Upsert struct {
	Tenant string `json:"tenant"`
	Plan   string `json:"plan"`
}

// Tenant is the record stored under "tenant/<name>".
type Tenant struct {
	Name      string            `json:"name"`
	Plan      string            `json:"plan"`
	Broadcast uint64            `json:"broadcast"`
	Offsets   map[string]uint64 `json:"offsets"` // vchannel -> logic offset of the message
	Updates   int               `json:"updates"`
}

func init() {
	sdk.OnValidate(MessageType, validate)
	sdk.OnAck(MessageType, upsert)
}

func decode(m sdk.Message) (Upsert, error) {
	var u Upsert
	if err := m.Decode(&u); err != nil {
		return u, sdk.Permanent(err)
	}
	if u.Tenant == "" || strings.Contains(u.Tenant, "/") {
		return u, sdk.Permanent(fmt.Errorf("tenant %q: want a non-empty name without '/'", u.Tenant))
	}
	return u, nil
}

func validate(m sdk.Message) error {
	u, err := decode(m)
	if err != nil {
		return err
	}
	plans, ok := sdk.Config("plans")
	if !ok {
		plans = "free,pro"
	}
	for _, p := range strings.Split(plans, ",") {
		if strings.TrimSpace(p) == u.Plan {
			return nil
		}
	}
	return sdk.Permanent(fmt.Errorf("tenant %s: unknown plan %q (plans: %s)", u.Tenant, u.Plan, plans))
}

func upsert(m sdk.Message) error {
	u, err := decode(m)
	if err != nil {
		return err
	}
	key := "tenant/" + u.Tenant
	t := Tenant{Name: u.Tenant}
	if old, ok, err := sdk.KVGet(key); err != nil {
		return err // retryable: the host retries the callback
	} else if ok {
		if err := json.Unmarshal(old, &t); err != nil {
			return sdk.Permanent(fmt.Errorf("%s: %w", key, err))
		}
	}
	t.Plan, t.Broadcast, t.Updates = u.Plan, m.ID, t.Updates+1
	t.Offsets = map[string]uint64{}
	for _, vc := range m.VChannels {
		t.Offsets[vc.Name] = vc.LogicOffset
	}
	b, _ := json.Marshal(t)
	if err := sdk.KVPut(key, b); err != nil {
		return err
	}
	sdk.Info("tenant upserted", "tenant", u.Tenant, "plan", u.Plan, "broadcast", m.ID, "attempt", m.Attempt)
	sdk.SpanEvent("tenant upserted", "tenant", u.Tenant, "updates", strconv.Itoa(t.Updates))
	return nil
}

func main() {}

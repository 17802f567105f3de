package host

import (
	"context"
	"errors"
	"testing"

	"github.com/hostd-dev/hostd/builtin/mapping"
	"github.com/hostd-dev/hostd/client"
	"github.com/hostd-dev/hostd/host/config"
	"github.com/hostd-dev/hostd/internal/wasmtest"
)

// Every message type has a required role, and POST /v1/broadcasts checks
// it (issue 11: a write token deleted a topic by broadcasting
// topic.delete, although DELETE /v1/topics/{t} needs admin). Every
// built-in type × every role over real HTTP with tokens, and a plugin type
// that declares admin (sdk.RequireRole): a weaker token gets 403
// permission_denied naming the required role, and nothing is broadcast; a
// strong enough token is not refused for its role.
func TestBroadcastTypeRoles(t *testing.T) {
	cfg := testConfig(t)
	cfg.API.Tokens = []config.Token{
		{Name: "r", Token: "read-secret-0123456789", Role: "read"},
		{Name: "w", Token: "write-secret-0123456789", Role: "write"},
		{Name: "a", Token: "admin-secret-0123456789", Role: "admin"},
	}
	cfg.Plugins.List = []config.Plugin{{Name: "echo", Path: wasmtest.Build(t, "../runtime/wasm/testdata/echo")}}
	h := startHost(t, cfg)
	ctx := context.Background()
	tokens := map[string]string{"read": "read-secret-0123456789", "write": "write-secret-0123456789", "admin": "admin-secret-0123456789"}
	rank := map[string]int{"read": 1, "write": 2, "admin": 3}
	admin, err := client.New(h.URL(), client.WithToken(tokens["admin"]))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := admin.CreateTopic(ctx, &client.TopicRequest{Topic: "victim", Queues: 1}); err != nil {
		t.Fatal(err)
	}
	payload := func(kind string) []byte {
		c := mapping.Change{Kind: kind, Topic: "victim", Queues: 2}
		_, b := c.Encode()
		return b
	}
	types := []struct {
		typ, need string
		payload   []byte
	}{
		{"noop", "write", nil},
		{"topic.create", "write", payload(mapping.KindCreate)},
		{"topic.grow", "write", payload(mapping.KindGrow)},
		{"topic.remap", "write", payload(mapping.KindRemap)},
		{"topic.delete", "admin", payload(mapping.KindDelete)},
		{"AdminOnly", "admin", []byte("x")}, // the echo plugin's type, sdk.RequireRole(sdk.RoleAdmin)
		{"Echo", "write", []byte("ok")},     // a plugin type that declares nothing
	}
	for _, tc := range types {
		for _, role := range []string{"read", "write", "admin"} {
			if tc.typ == "topic.delete" && role == "admin" {
				continue // would delete the topic the other cases use; done last
			}
			c, err := client.New(h.URL(), client.WithToken(tokens[role]))
			if err != nil {
				t.Fatal(err)
			}
			_, err = c.SubmitBroadcast(ctx, &client.BroadcastRequest{Type: tc.typ, Payload: tc.payload, Wait: "persisted", Timeout: "20s"})
			var ce *client.Error
			denied := errors.As(err, &ce) && ce.Status == 403
			if rank[role] < rank[tc.need] {
				// A read token is refused by the route itself (it needs
				// write) before the type is looked at.
				want := tc.need
				if role == "read" {
					want = "write"
				}
				if !denied || ce.Code != "permission_denied" || ce.Details["required_role"] != want {
					t.Fatalf("%s as %s: %v (details %v), want 403 permission_denied, required_role %s", tc.typ, role, err, detailsOf(ce), want)
				}
				if role != "read" && ce.Details["type"] != tc.typ {
					t.Fatalf("%s as %s: details %v do not name the type", tc.typ, role, ce.Details)
				}
				continue
			}
			if denied {
				t.Fatalf("%s as %s (needs %s): refused: %v", tc.typ, role, tc.need, err)
			}
		}
	}
	if _, err := admin.DescribeTopic(ctx, "victim"); err != nil {
		t.Fatalf("the topic is gone after refused deletes: %v", err)
	}
	if _, err := admin.SubmitBroadcast(ctx, &client.BroadcastRequest{Type: "topic.delete", Payload: payload(mapping.KindDelete), Timeout: "60s"}); err != nil {
		t.Fatalf("topic.delete as admin: %v", err)
	}
	if _, err := admin.DescribeTopic(ctx, "victim"); !client.IsNotFound(err) {
		t.Fatalf("topic after an admin's topic.delete: %v", err)
	}
}

func detailsOf(e *client.Error) map[string]any {
	if e == nil {
		return nil
	}
	return e.Details
}

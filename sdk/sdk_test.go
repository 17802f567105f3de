//go:build !wasip1

package sdk

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/hostd-dev/hostd/sdk/abi"
)

type memBackend struct {
	kv   map[string][]byte
	logs []string
}

func (b *memBackend) KVGet(k string) ([]byte, bool, error) { v, ok := b.kv[k]; return v, ok, nil }
func (b *memBackend) KVPut(k string, v []byte) error       { b.kv[k] = v; return nil }
func (b *memBackend) KVDelete(k string) error              { delete(b.kv, k); return nil }
func (b *memBackend) KVScan(p, a string, n int) ([]KV, bool, error) {
	return nil, false, nil
}
func (b *memBackend) Config(k string) (string, bool) { return "v-" + k, true }
func (b *memBackend) Log(l int32, m string)          { b.logs = append(b.logs, m) }
func (b *memBackend) SpanEvent(string, []abi.Attr)   {}
func (b *memBackend) SpanAttrs([]abi.Attr)           {}
func (b *memBackend) Now() time.Time                 { return time.Unix(100, 0) }

type payload struct{ Name string }

func init() {
	OnAck("T", func(m Message) error {
		var p payload
		if err := m.Decode(&p); err != nil {
			return Permanent(err)
		}
		switch p.Name {
		case "boom":
			panic("boom")
		case "retry":
			return errors.New("later")
		}
		Info("acked", "name", p.Name, "attempt", m.Attempt)
		return KVPut("last", []byte(p.Name))
	})
	ResourceKeys("T", func(m Message) ([]abi.ResourceKey, error) {
		return []abi.ResourceKey{{Domain: "collection", Key: m.Property("c"), Mode: abi.Exclusive}}, nil
	})
	Policy("p", func(in PolicyInput) (PolicyOutput, error) {
		return PolicyOutput{Assignments: []abi.Assignment{{Queue: 0, Broker: in.Brokers[0].Name}}}, nil
	})
}

func TestNativeDispatch(t *testing.T) {
	b := &memBackend{kv: map[string][]byte{}}
	prev := SetBackend(b)
	defer SetBackend(prev)

	in := abi.AppendMessage(nil, &abi.Message{Type: "T", Payload: []byte(`{"Name":"x"}`), Attempt: 2,
		Properties: map[string]string{"c": "db.c"}})
	code, _, m, err := Dispatch(abi.KindAck, "T", in)
	if err != nil || code != abi.CodeOK || m != "" || string(b.kv["last"]) != "x" {
		t.Fatalf("ack: %v %v %q %v", code, err, m, b.kv)
	}
	if len(b.logs) != 1 || b.logs[0] != "acked name=x attempt=2" {
		t.Fatalf("logs = %q", b.logs)
	}
	for name, want := range map[string]abi.Code{`{"Name":"retry"}`: abi.CodeRetryable, `nope`: abi.CodePermanent, `{"Name":"boom"}`: abi.CodePermanent} {
		in := abi.AppendMessage(nil, &abi.Message{Type: "T", Payload: []byte(name)})
		if code, _, msg, _ := Dispatch(abi.KindAck, "T", in); code != want || msg == "" {
			t.Errorf("%s: code %v msg %q, want %v", name, code, msg, want)
		}
	}
	code, out, _, _ := Dispatch(abi.KindResourceKeys, "T", in)
	keys, err := abi.DecodeResourceKeys(out)
	if code != abi.CodeOK || err != nil || len(keys) != 1 || keys[0].Key != "db.c" {
		t.Fatalf("keys: %v %v %v", code, keys, err)
	}
	code, out, _, _ = Dispatch(abi.KindPolicy, "p", abi.AppendPolicyInput(nil, &abi.PolicyInput{Brokers: []abi.Broker{{Name: "b1"}}}))
	po, err := abi.DecodePolicyOutput(out)
	if code != abi.CodeOK || err != nil || po.Assignments[0].Broker != "b1" {
		t.Fatalf("policy: %v %+v %v", code, po, err)
	}
	if _, _, _, err := Dispatch(abi.KindValidator, "T", in); !errors.Is(err, ErrNoHandler) {
		t.Fatalf("missing validator: %v", err)
	}
	if got := Registrations(); len(got) != 3 || got[0] != (Registration{Kind: abi.KindAck, Name: "T"}) {
		t.Fatalf("registrations = %v", got)
	}
	if v, ok := Config("k"); !ok || v != "v-k" || !Now().Equal(time.Unix(100, 0)) {
		t.Fatal("config/now not from backend")
	}
}

func TestErrorsAndValidation(t *testing.T) {
	SetBackend(nil)
	if _, _, err := KVGet("k"); !errors.Is(err, ErrNoBackend) {
		t.Fatalf("no backend: %v", err)
	}
	if err := KVPut("", nil); !errors.Is(err, ErrInvalid) {
		t.Fatalf("empty key: %v", err)
	}
	if err := KVPut(strings.Repeat("k", abi.MaxKeyLen+1), nil); !errors.Is(err, ErrInvalid) {
		t.Fatalf("long key: %v", err)
	}
	if err := KVPut("k", make([]byte, abi.MaxValueLen+1)); !errors.Is(err, ErrInvalid) {
		t.Fatalf("big value: %v", err)
	}
	p := Permanent(errors.New("x"))
	if !IsPermanent(p) || !IsPermanent(Permanent(p)) || Permanent(nil) != nil || IsPermanent(errors.New("y")) {
		t.Fatal("Permanent")
	}
	he := &HostError{Status: abi.StatusQuota, Message: "full"}
	if !errors.Is(he, ErrQuota) || !strings.Contains(he.Error(), "quota") {
		t.Fatal("HostError")
	}
	if got := format("m", []any{"a", 1, "b", "x y", "c"}); got != `m a=1 b="x y" c=!MISSING` {
		t.Fatalf("format = %q", got)
	}
}

// The guest side decodes host bytes through the same dispatch path: it must
// never panic on arbitrary input (the handler's own panic is recovered by
// Dispatch, so a decoder panic would show up as a "panic:" message).
func FuzzDispatch(f *testing.F) {
	f.Add(int8(abi.KindAck), abi.AppendMessage(nil, &abi.Message{Type: "T", Payload: []byte(`{"Name":"x"}`)}))
	f.Add(int8(abi.KindPolicy), abi.AppendPolicyInput(nil, &abi.PolicyInput{Brokers: []abi.Broker{{Name: "b"}}}))
	f.Add(int8(abi.KindResourceKeys), []byte{1, 1})
	b := &memBackend{kv: map[string][]byte{}}
	SetBackend(b)
	f.Fuzz(func(t *testing.T, kind int8, in []byte) {
		name := "T"
		if abi.Kind(kind) == abi.KindPolicy {
			name = "p"
		}
		code, _, msg, err := Dispatch(abi.Kind(kind), name, in)
		if err != nil {
			return
		}
		if strings.HasPrefix(msg, "panic:") && !strings.Contains(msg, "boom") && !strings.Contains(msg, "index out of range") {
			t.Fatalf("decoder panicked: %s", msg)
		}
		_ = code
	})
}

// RequireRole travels in register's kind argument (bits 8..15), and only
// valid roles on message types are accepted.
func TestRequireRole(t *testing.T) {
	for _, c := range []struct {
		kind abi.Kind
		role abi.Role
	}{{abi.KindAck, abi.RoleAdmin}, {abi.KindValidator, abi.RoleWrite}, {abi.KindResourceKeys, abi.RoleDefault}} {
		v := abi.RegisterKind(c.kind, c.role)
		if k, r, ok := abi.SplitRegisterKind(v); !ok || k != c.kind || r != c.role {
			t.Fatalf("%v %v: %#x splits into %v %v %v", c.kind, c.role, v, k, r, ok)
		}
	}
	if v := abi.RegisterKind(abi.KindAck, abi.RoleDefault); v != int32(abi.KindAck) {
		t.Fatalf("the default role changes the kind argument: %#x (old plugins pass the bare kind)", v)
	}
	for _, bad := range []int32{1 | 1<<8, 1 | 4<<8, 1 | 1<<16, -1} {
		if _, _, ok := abi.SplitRegisterKind(bad); ok {
			t.Fatalf("%#x accepted", bad)
		}
	}
	OnAck("admin.only", func(Message) error { return nil }, RequireRole(RoleAdmin))
	regs := Registrations()
	if last := regs[len(regs)-1]; last.Name != "admin.only" || last.Role != abi.RoleAdmin {
		t.Fatalf("registration %+v", last)
	}
	mustPanic := func(what string, f func()) {
		t.Helper()
		defer func() {
			if recover() == nil {
				t.Fatalf("%s did not panic", what)
			}
		}()
		f()
	}
	mustPanic("a role on a policy", func() {
		Policy("pol.role", func(PolicyInput) (PolicyOutput, error) { return PolicyOutput{}, nil }, RequireRole(RoleAdmin))
	})
	mustPanic("role read", func() { OnAck("read.role", func(Message) error { return nil }, RequireRole(1)) })
}

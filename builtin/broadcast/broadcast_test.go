package broadcast

import (
	"context"
	"errors"
	"testing"

	"github.com/hostd-dev/hostd/sdk/abi"
)

func TestNoopBroadcastCompletes(t *testing.T) {
	v := newEnv(t, vcs(3), nil, nil)
	r := v.submit(context.Background(), Request{Message: Message{Type: NoopType, Payload: []byte("x")}, VChannels: vcs(3)})
	if r.State != StateTombstone || r.Duplicate || len(r.Appends) != 4 {
		t.Fatalf("result %+v", r)
	}
	in, err := v.e.Get(r.ID)
	if err != nil || in.State != StateTombstone || in.FinishedAt == nil || in.Attempts != 1 {
		t.Fatalf("get %+v %v", in, err)
	}
	v.assertNoDuplicates(vcs(3)...)
	v.restart()
	in2, err := v.e.Get(r.ID)
	if err != nil || in2.State != StateTombstone || !in2.FinishedAt.Equal(*in.FinishedAt) {
		t.Fatalf("after restart %+v %v", in2, err)
	}
}

func TestBadInput(t *testing.T) {
	v := newEnv(t, vcs(1), nil, nil)
	long := make([]byte, 257)
	for i := range long {
		long[i] = 'k'
	}
	cases := []struct {
		name string
		req  Request
		want error
	}{
		{"empty type", Request{VChannels: vcs(1)}, ErrInvalidRequest},
		{"unknown type", Request{Message: Message{Type: "nope"}}, ErrUnknownType},
		{"unknown vchannel", Request{Message: Message{Type: NoopType}, VChannels: []string{"missing/0"}}, ErrUnknownVChannel},
		{"key too long", Request{Message: Message{Type: NoopType}, IdempotencyKey: string(long)}, ErrKeyTooLong},
		{"payload too large", Request{Message: Message{Type: NoopType, Payload: make([]byte, DefaultMaxPayload+1)}}, ErrTooLarge},
		{"empty resource key", Request{Message: Message{Type: NoopType}, ResourceKeys: []abi.ResourceKey{{Domain: "x"}}}, ErrInvalidRequest},
		{"bad scope", Request{Message: Message{Type: NoopType}, Scope: Scope{Kind: "galaxy"}}, ErrInvalidRequest},
		{"reserved property", Request{Message: Message{Type: NoopType, Properties: map[string]string{HeaderBroadcastID: "1"}}}, ErrInvalidRequest},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := v.e.Submit(context.Background(), &c.req)
			if !errors.Is(err, c.want) {
				t.Fatalf("got %v, want %v", err, c.want)
			}
		})
	}
	if l, _ := v.e.List(Filter{}); len(l) != 0 {
		t.Fatalf("bad input persisted tasks: %+v", l)
	}
}

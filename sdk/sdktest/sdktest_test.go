package sdktest_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/hostd-dev/hostd/sdk"
	"github.com/hostd-dev/hostd/sdk/abi"
	"github.com/hostd-dev/hostd/sdk/sdktest"
)

// The handlers under test: a tiny plugin registered by this test binary.
func init() {
	// Put: payload "k=v[,k=v...]" puts each pair, then reads them back
	// (own writes), scans, logs and adds a span event. "fail" after the
	// writes fails retryably, "perm" permanently, "panic" panics.
	sdk.OnAck("Put", func(m sdk.Message) error {
		for _, kv := range strings.Split(string(m.Payload), ",") {
			k, v, _ := strings.Cut(kv, "=")
			switch k {
			case "fail":
				return errors.New("asked to fail")
			case "perm":
				return sdk.Permanent(errors.New("asked to fail for good"))
			case "panic":
				panic("asked to panic")
			case "del":
				if err := sdk.KVDelete(v); err != nil {
					return err
				}
				continue
			}
			if err := sdk.KVPut(k, []byte(v)); err != nil {
				return err
			}
			got, ok, err := sdk.KVGet(k)
			if err != nil || !ok || string(got) != v {
				return sdk.Permanent(errors.New("own write not visible"))
			}
		}
		entries, _, err := sdk.KVScan("", "", 0)
		if err != nil {
			return err
		}
		sdk.Info("put done", "keys", len(entries), "attempt", m.Attempt)
		sdk.SpanEvent("put", "id", "x")
		sdk.SpanAttr("keys", "n")
		return nil
	})
	sdk.OnValidate("Put", func(m sdk.Message) error {
		if string(m.Payload) == "write" {
			return sdk.KVPut("x", nil)
		}
		if _, ok, err := sdk.KVGet("blocked"); err != nil {
			return err
		} else if ok {
			return sdk.Permanent(errors.New("blocked"))
		}
		if v, _ := sdk.Config("mode"); v == "strict" && len(m.Payload) == 0 {
			return sdk.Permanent(errors.New("empty payload in strict mode"))
		}
		return nil
	})
	sdk.ResourceKeys("Put", func(m sdk.Message) ([]abi.ResourceKey, error) {
		return []abi.ResourceKey{{Domain: "kv", Key: string(m.Payload), Mode: abi.Exclusive}}, nil
	})
	sdk.Policy("first", func(in sdk.PolicyInput) (sdk.PolicyOutput, error) {
		var out sdk.PolicyOutput
		for q := uint32(0); q < in.Queues; q++ {
			out.Assignments = append(out.Assignments, abi.Assignment{Queue: q, Broker: in.Brokers[0].Name})
		}
		_ = sdk.Now()
		return out, nil
	})
}

func TestAckCommitsOnSuccess(t *testing.T) {
	h := sdktest.New(t)
	res := h.Ack("Put", []byte("a=1,b=2"))
	if !res.OK() {
		t.Fatal(res)
	}
	if got := h.KV().Map(); len(got) != 2 || got["a"] != "1" || got["b"] != "2" {
		t.Fatalf("kv = %v", got)
	}
	if len(res.Ops) != 2 || res.Ops[0].Key != "a" || res.Ops[1].Key != "b" {
		t.Fatalf("ops = %+v", res.Ops)
	}
	if !h.Logged("put done keys=2 attempt=1") {
		t.Fatalf("logs = %v", h.Logs())
	}
	if ev := h.SpanEvents(); len(ev) != 1 || ev[0].Name != "put" || ev[0].Attrs[0] != (abi.Attr{Key: "id", Value: "x"}) {
		t.Fatalf("events = %+v", ev)
	}
	if a := h.SpanAttrs(); len(a) != 1 || a[0].Key != "keys" {
		t.Fatalf("attrs = %+v", a)
	}
	// Delete through a later callback.
	if res := h.Ack("Put", []byte("del=a")); !res.OK() || !res.Ops[0].Delete {
		t.Fatal(res)
	}
	if _, ok := h.KV().Get("a"); ok {
		t.Fatal("a not deleted")
	}
}

func TestAckFailureDiscardsWrites(t *testing.T) {
	h := sdktest.New(t)
	h.KV().Put("keep", []byte("v"))
	for _, tc := range []struct {
		payload string
		check   func(sdktest.Result) bool
	}{
		{"a=1,fail", sdktest.Result.Retryable},
		{"a=1,perm", sdktest.Result.Permanent},
		{"a=1,panic", sdktest.Result.Permanent},
	} {
		res := h.Ack("Put", []byte(tc.payload))
		if !tc.check(res) || res.OK() {
			t.Fatalf("%s: %v", tc.payload, res)
		}
		if len(res.Ops) != 1 {
			t.Fatalf("%s: staged ops = %+v", tc.payload, res.Ops)
		}
		if got := h.KV().Map(); len(got) != 1 || got["keep"] != "v" {
			t.Fatalf("%s: kv = %v", tc.payload, got)
		}
	}
	res := h.Ack("Put", []byte("panic"))
	if !strings.Contains(res.Message, "asked to panic") || !sdk.IsPermanent(res.Err()) {
		t.Fatalf("panic result: %v / %v", res, res.Err())
	}
}

func TestReadOnlyOutsideAck(t *testing.T) {
	h := sdktest.New(t)
	res := h.Validate("Put", []byte("write"))
	if res.OK() || !strings.Contains(res.Message, "read-only") {
		t.Fatalf("validator write: %v", res)
	}
	if h.KV().Len() != 0 {
		t.Fatal("validator wrote")
	}
	h.KV().Put("blocked", []byte("1"))
	if res := h.Validate("Put", []byte("x")); !res.Permanent() || res.Message != "blocked" {
		t.Fatalf("validator read: %v", res)
	}
}

func TestConfig(t *testing.T) {
	h := sdktest.New(t)
	if res := h.Validate("Put", nil); !res.OK() {
		t.Fatal(res)
	}
	h.SetConfig("mode", "strict")
	if res := h.Validate("Put", nil); !res.Permanent() {
		t.Fatal(res)
	}
}

func TestQuota(t *testing.T) {
	h := sdktest.New(t)
	h.SetQuota(2, 0)
	if res := h.Ack("Put", []byte("a=1,b=2")); !res.OK() {
		t.Fatal(res)
	}
	res := h.Ack("Put", []byte("c=3"))
	if !res.Retryable() || !strings.Contains(res.Message, "quota") {
		t.Fatalf("over quota: %v", res)
	}
	if res := h.Ack("Put", []byte("a=9")); !res.OK() {
		t.Fatalf("overwrite within quota: %v", res)
	}
	h.SetQuota(0, 5)
	if res := h.Ack("Put", []byte("a=12345")); res.OK() {
		t.Fatal("byte quota not enforced")
	}
}

func TestResourceKeysAndPolicy(t *testing.T) {
	h := sdktest.New(t)
	keys, res := h.ResourceKeys("Put", []byte("k1"))
	if !res.OK() || len(keys) != 1 || keys[0] != (abi.ResourceKey{Domain: "kv", Key: "k1", Mode: abi.Exclusive}) {
		t.Fatalf("keys %v, %v", keys, res)
	}
	// An empty key is rejected by the SDK, as in the Wasm build.
	if _, res := h.ResourceKeys("Put", nil); !res.Permanent() {
		t.Fatalf("empty key: %v", res)
	}
	h.SetNow(func() time.Time { return time.Unix(0, 0) })
	out, res := h.Policy("first", sdk.PolicyInput{Queues: 2, Brokers: []abi.Broker{{Name: "b1"}}})
	if !res.OK() || len(out.Assignments) != 2 || out.Assignments[1].Broker != "b1" {
		t.Fatalf("policy %v, %v", out, res)
	}
}

func TestNoHandler(t *testing.T) {
	h := sdktest.New(t)
	res := h.Ack("Nope", nil)
	if res.OK() || !res.NoHandler || !errors.Is(res.Err(), sdk.ErrNoHandler) {
		t.Fatalf("%v", res)
	}
}

func TestMessageFields(t *testing.T) {
	h := sdktest.New(t)
	m := h.Msg("Put", []byte("a=1"))
	m2 := h.Msg("Put", []byte("a=1"))
	if m.ID == 0 || m2.ID != m.ID+1 || m.Attempt != 1 {
		t.Fatalf("ids %d %d attempt %d", m.ID, m2.ID, m.Attempt)
	}
	m.Attempt = 3
	if res := h.AckMessage(m); !res.OK() || !h.Logged("attempt=3") {
		t.Fatalf("%v %v", res, h.Logs())
	}
}

// fakeTB records Fatal instead of stopping the goroutine.
type fakeTB struct {
	testing.TB
	fatal string
}

func (f *fakeTB) Fatal(args ...any) { f.fatal = fmt.Sprint(args...) }

func TestOneHarnessAtATime(t *testing.T) {
	h := sdktest.New(t)
	f := &fakeTB{TB: t}
	if h2 := sdktest.New(f); h2 != nil || !strings.Contains(f.fatal, "another Harness is active") {
		t.Fatalf("second harness: %v, fatal %q", h2, f.fatal)
	}
	// The first one still works.
	if res := h.Ack("Put", []byte("a=1")); !res.OK() {
		t.Fatal(res)
	}
}

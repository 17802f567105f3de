package wasm

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/hostd-dev/hostd/runtime/catalog"
	"github.com/hostd-dev/hostd/sdk/abi"
)

var bg = context.Background()

func msg(typ, payload string) *abi.Message {
	return &abi.Message{ID: 7, Type: typ, Payload: []byte(payload), Attempt: 1}
}

func TestHandlersAndResults(t *testing.T) {
	r := mustRuntime(t, Config{Plugins: []Spec{{Name: "echo", Path: echoWasm(t)}}, Store: openStore(t),
		Defaults: Limits{PoolSize: 1}})
	h, ok := r.Lookup("Echo")
	if want := (Handlers{Plugin: "echo", Ack: true, Validate: true, ResourceKeys: true, Role: abi.RoleWrite}); !ok || h != want {
		t.Fatalf("Lookup(Echo) = %+v %v, want %+v", h, ok, want)
	}
	if h, _ := r.Lookup("Counter"); h.Validate || !h.Ack {
		t.Fatalf("Counter handlers = %+v", h)
	}
	if _, ok := r.Lookup("Nope"); ok {
		t.Fatal("Lookup(Nope) found")
	}
	if !r.HasPolicy("round-robin") {
		t.Fatal("policy not registered")
	}

	if _, err := r.Ack(bg, msg("Echo", "ok")); err != nil {
		t.Fatal(err)
	}
	_, err := r.Ack(bg, msg("Echo", "fail"))
	if KindOf(err) != KindRetryable || IsPermanent(err) || !strings.Contains(err.Error(), "asked to fail") || !strings.Contains(err.Error(), "plugin echo") {
		t.Fatalf("fail: %v", err)
	}
	_, err = r.Ack(bg, msg("Echo", "permanent"))
	if !IsPermanent(err) || !strings.Contains(err.Error(), "asked to fail for good") {
		t.Fatalf("permanent: %v", err)
	}
	if err := r.Validate(bg, msg("Echo", "reject"), nil); !IsPermanent(err) || !strings.Contains(err.Error(), "rejected by validator") {
		t.Fatalf("validate reject: %v", err)
	}
	if err := r.Validate(bg, msg("Echo", "ok"), nil); err != nil {
		t.Fatal(err)
	}
	keys, err := r.ResourceKeys(bg, msg("Echo", `{"DB":"d1","Name":"c1"}`))
	want := []abi.ResourceKey{{Domain: "collection", Key: "d1.c1", Mode: abi.Exclusive}, {Domain: "database", Key: "d1", Mode: abi.Shared}}
	if err != nil || !cmp.Equal(keys, want) {
		t.Fatalf("keys = %v, %v", keys, err)
	}
	if _, err := r.ResourceKeys(bg, msg("Echo", `not json`)); !IsPermanent(err) {
		t.Fatalf("bad payload: %v", err)
	}
	out, err := r.Policy(bg, "round-robin", &abi.PolicyInput{Operation: "create", Topic: "t", Queues: 3,
		Brokers: []abi.Broker{{Name: "a"}, {Name: "b"}}})
	if err != nil || !cmp.Equal(out.Assignments, []abi.Assignment{{Queue: 0, Broker: "a"}, {Queue: 1, Broker: "b"}, {Queue: 2, Broker: "a"}}) {
		t.Fatalf("policy = %+v, %v", out, err)
	}
	if _, err := r.Ack(bg, msg("Nope", "")); !errors.Is(err, ErrNoHandler) {
		t.Fatalf("unknown type: %v", err)
	}
	if err := r.Validate(bg, msg("Counter", ""), nil); !errors.Is(err, ErrNoHandler) {
		t.Fatalf("no validator: %v", err)
	}
	l := r.List()
	if len(l) != 1 || l[0].Name != "echo" || l[0].ABI != 1 || len(l[0].SHA256) != 64 || l[0].Calls < 8 || l[0].Failures < 3 || len(l[0].Registrations) != 6 {
		t.Fatalf("List = %+v", l)
	}
}

func TestAckKVIsStagedAndCommittedByCaller(t *testing.T) {
	store := openStore(t)
	r := mustRuntime(t, Config{Plugins: []Spec{{Name: "echo", Path: echoWasm(t), Config: map[string]string{"color": "blue"}}},
		Store: store, Defaults: Limits{PoolSize: 1}})
	res, err := r.Ack(bg, msg("Echo", "put a=1 b=2"))
	if err != nil {
		t.Fatal(err)
	}
	// Blind writes (keys not read) are not checked reads; the namespace's
	// usage record is (its new value is the third op, checked at the
	// version read: absent here).
	if res.Plugin != "echo" || len(res.Ops) != 3 || len(res.Checks) != 1 || string(res.Checks[0].Key) != "pkv/echo" || res.Checks[0].Version != 0 {
		t.Fatalf("result = %+v", res)
	}
	if _, _, err := r.KVGet(bg, "echo", []byte("a")); !errors.Is(err, catalog.ErrNotFound) {
		t.Fatalf("write visible before commit: %v", err)
	}
	if err := commit(bg, store, res); err != nil {
		t.Fatal(err)
	}
	if v, _, err := r.KVGet(bg, "echo", []byte("a")); err != nil || string(v) != "1" {
		t.Fatalf("a = %q %v", v, err)
	}
	// Reads see own writes within a call.
	if _, err := r.Ack(bg, msg("Echo", "readown k")); err != nil {
		t.Fatal(err)
	}
	// Scan merges committed and staged data, and records a range check.
	res, err = r.Ack(bg, msg("Echo", "scan "))
	if err != nil {
		t.Fatal(err)
	}
	if len(res.RangeChecks) != 1 || len(res.RangeChecks[0].Seen) != 2 || string(res.Ops[0].Value) != "a=1,b=2 more=false" {
		t.Fatalf("scan result %+v / %q", res.RangeChecks, res.Ops[0].Value)
	}
	// Config and message fields reach the guest; the clock is real.
	res, _ = r.Ack(bg, msg("Echo", "config color"))
	if string(res.Ops[0].Value) != "blue:true" {
		t.Fatalf("config = %q", res.Ops[0].Value)
	}
	m := msg("Echo", "env")
	m.Properties = map[string]string{"p": "q"}
	m.VChannels = []abi.VChannel{{Name: "_control/0", Appended: true, LogicOffset: 3, PhysicalQueue: "b/1", TimeTick: 9}}
	m.TraceParent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
	res, err = r.Ack(bg, m)
	if err != nil {
		t.Fatal(err)
	}
	var env struct {
		ID      uint64
		Type    string
		Props   map[string]string
		Attempt uint32
		TP      string
		Now     int64
		Vch     []abi.VChannel
	}
	if err := json.Unmarshal(res.Ops[0].Value, &env); err != nil {
		t.Fatal(err)
	}
	if env.ID != 7 || env.Type != "Echo" || env.Props["p"] != "q" || env.Attempt != 1 || env.TP != m.TraceParent || len(env.Vch) != 1 || env.Vch[0].TimeTick != 9 {
		t.Fatalf("env = %+v", env)
	}
	if d := time.Since(time.Unix(0, env.Now)); d < 0 || d > 10*time.Second {
		t.Fatalf("guest clock is %v off", d)
	}
	// Delete is staged and committed the same way.
	res, _ = r.Ack(bg, msg("Echo", "del a"))
	if len(res.Ops) != 2 || !res.Ops[0].Delete || len(res.Checks) != 1 || string(res.Checks[0].Key) != "pkv/echo" { // + the usage record
		t.Fatalf("del result %+v", res)
	}
	if err := commit(bg, store, res); err != nil {
		t.Fatal(err)
	}
	entries, next, err := r.KVScan(bg, "echo", nil, nil, 10)
	if err != nil || len(entries) != 1 || string(entries[0].Key) != "b" || next != nil {
		t.Fatalf("KVScan = %v %q %v", entries, next, err)
	}
}

func TestConflictingCallbacksAreDetected(t *testing.T) {
	store := openStore(t)
	r := mustRuntime(t, Config{Plugins: []Spec{{Name: "echo", Path: echoWasm(t)}}, Store: store, Defaults: Limits{PoolSize: 2}})
	a, err := r.Ack(bg, msg("Counter", ""))
	if err != nil {
		t.Fatal(err)
	}
	b, err := r.Ack(bg, msg("Counter", ""))
	if err != nil {
		t.Fatal(err)
	}
	if err := commit(bg, store, a); err != nil {
		t.Fatal(err)
	}
	if err := commit(bg, store, b); !isConflict(err) {
		t.Fatalf("second commit of a stale read: %v, want conflict", err)
	}
	// Scans conflict with an insert into the scanned range.
	s, err := r.Ack(bg, msg("Echo", "scan x"))
	if err != nil {
		t.Fatal(err)
	}
	ins, _ := r.Ack(bg, msg("Echo", "put x1=1"))
	if err := commit(bg, store, ins); err != nil {
		t.Fatal(err)
	}
	if err := commit(bg, store, s); !isConflict(err) {
		t.Fatalf("scan after insert: %v, want conflict", err)
	}
}

func TestReadOnlyAndQuota(t *testing.T) {
	store := openStore(t)
	r := mustRuntime(t, Config{Plugins: []Spec{{Name: "echo", Path: echoWasm(t), Limits: Limits{KVMaxKeys: 2}}},
		Store: store, Defaults: Limits{PoolSize: 1}})
	err := r.Validate(bg, msg("Echo", "write"), nil)
	if KindOf(err) != KindRetryable || !strings.Contains(err.Error(), "read-only") {
		t.Fatalf("validator write: %v", err)
	}
	_, err = r.Ack(bg, msg("Echo", "put a=1 b=2 c=3"))
	if err == nil || !strings.Contains(err.Error(), "quota") || !strings.Contains(err.Error(), "limit of 2") {
		t.Fatalf("quota: %v", err)
	}
	res, err := r.Ack(bg, msg("Echo", "put a=1 b=2"))
	if err != nil {
		t.Fatal(err)
	}
	if err := commit(bg, store, res); err != nil {
		t.Fatal(err)
	}
	// Overwriting an existing key does not need a new key slot: at the
	// limit the committed sizes are read, and the reads become checks.
	res, err = r.Ack(bg, msg("Echo", "put a=9"))
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Checks) != 1 || string(res.Checks[0].Key) != string(NamespacePrefix("echo"))+"a" || res.Checks[0].Version == 0 {
		t.Fatalf("checks of a put at the limit: %+v", res.Checks)
	}
	// A new key is still refused at the limit, after an overwrite that fits.
	if _, err := r.Ack(bg, msg("Echo", "put a=9 c=3")); err == nil || !strings.Contains(err.Error(), "limit of 2") {
		t.Fatalf("third key: %v", err)
	}
}

func TestByteQuotaCountsOverwritesExactly(t *testing.T) {
	store := openStore(t)
	// "pkv/echo/a" is 10 bytes: the limit fits the key with a 10-byte value.
	r := mustRuntime(t, Config{Plugins: []Spec{{Name: "echo", Path: echoWasm(t), Limits: Limits{KVMaxBytes: 20}}},
		Store: store, Defaults: Limits{PoolSize: 1}})
	if _, err := r.Ack(bg, msg("Echo", "put a=01234567890")); err == nil || !strings.Contains(err.Error(), "21 bytes would exceed the limit of 20") {
		t.Fatalf("over the byte quota: %v", err)
	}
	res, err := r.Ack(bg, msg("Echo", "put a=0123456789"))
	if err != nil {
		t.Fatal(err)
	}
	if err := commit(bg, store, res); err != nil {
		t.Fatal(err)
	}
	// Overwrites within one call, then a same-size overwrite of the
	// committed key: exactly at the limit, so it fits.
	if _, err := r.Ack(bg, msg("Echo", "put a=0 a=9876543210")); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Ack(bg, msg("Echo", "put a=98765432101")); err == nil || !strings.Contains(err.Error(), "21 bytes") {
		t.Fatalf("growing the committed value past the limit: %v", err)
	}
}

func TestGuestOutputIsCapturedAndCapped(t *testing.T) {
	rec := &recorder{}
	r := mustRuntime(t, Config{Plugins: []Spec{{Name: "echo", Path: echoWasm(t), Limits: Limits{MaxLogBytes: 1000}}},
		Logger: slog.New(rec), Defaults: Limits{PoolSize: 1}})
	if _, err := r.Ack(bg, msg("Echo", "log hi")); err != nil {
		t.Fatal(err)
	}
	got, ok := rec.find("hello from echo arg=hi")
	if !ok || attrOf(got, "plugin") != "echo" {
		t.Fatalf("guest log not found: %+v", rec.recs)
	}
	if got, ok := rec.find("stdout line"); !ok || attrOf(got, "stream") != "stdout" {
		t.Fatal("stdout not captured")
	}
	if _, err := r.Ack(bg, msg("Echo", "spam")); err != nil {
		t.Fatal(err)
	}
	if got, ok := rec.find("plugin output truncated"); !ok || attrOf(got, "plugin") != "echo" {
		t.Fatal("no truncation note")
	}
	rec.mu.Lock()
	n := 0
	for _, x := range rec.recs {
		if strings.HasPrefix(x.Message, "spam") {
			n++
		}
	}
	rec.mu.Unlock()
	if n == 0 || n > 30 {
		t.Fatalf("%d spam lines logged with a 1000-byte budget", n)
	}
}

package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/hostd-dev/hostd/client"
)

// TestTopicTranslateCLI runs `hostd topic translate` both ways, `channel
// bounds`, `topic delete --dry-run` and the commands' argument errors
// against a real daemon through the real binary.
func TestTopicTranslateCLI(t *testing.T) {
	dir := t.TempDir()
	d := startDaemon(t, dir, "-c", mappingConfig(t, dir, "127.0.0.1:0"))
	cli := func(args ...string) string {
		t.Helper()
		out, errOut, code := runCLI(t, dir, append([]string{"--addr", d.addr}, args...)...)
		if code != 0 {
			t.Fatalf("hostd %v: exit %d\n%s%s", args, code, out, errOut)
		}
		return out
	}
	fails := func(wantCode int, wantErr string, args ...string) {
		t.Helper()
		out, errOut, code := runCLI(t, dir, append([]string{"--addr", d.addr}, args...)...)
		if code != wantCode || !strings.Contains(errOut, wantErr) {
			t.Fatalf("hostd %v: exit %d (want %d), stderr %q (want %q), stdout %q", args, code, wantCode, errOut, wantErr, out)
		}
	}
	translate := func(args ...string) client.Translation {
		t.Helper()
		var tr client.Translation
		out := cli(append([]string{"topic", "translate", "-o", "json"}, args...)...)
		if err := json.Unmarshal([]byte(out), &tr); err != nil {
			t.Fatalf("translate %v: %v\n%s", args, err, out)
		}
		return tr
	}

	cli("topic", "create", "orders", "--queues", "1", "--brokers", "a")
	cli("channel", "append", "orders/0", "zero", "one", "two")
	cli("topic", "remap", "orders", "--brokers", "b") // offset 3 is the remap marker
	cli("channel", "append", "orders/0", "four")

	tr := translate("orders/0", "1")
	if tr.Broker != "a" || !strings.HasPrefix(tr.PhysicalQueue, "a/") || tr.PhysicalOffset != 1 || tr.SegmentIndex != 0 || !tr.Retained {
		t.Fatalf("orders/0@1: %+v", tr)
	}
	back := translate("--physical", tr.PhysicalQueue, "1")
	if back.VChannel != "orders/0" || back.LogicOffset != 1 {
		t.Fatalf("back from %s@1: %+v", tr.PhysicalQueue, back)
	}
	lead := translate("orders/0", "4")
	if lead.Broker != "b" || lead.PhysicalOffset != 0 || lead.SegmentIndex != 1 || !lead.Segment.Open {
		t.Fatalf("orders/0@4: %+v", lead)
	}
	out := cli("topic", "translate", "orders/0", "4")
	for _, want := range []string{"VCHANNEL", "PHYSICAL QUEUE", "RETAINED", lead.PhysicalQueue, "true"} {
		if !strings.Contains(out, want) {
			t.Fatalf("table lacks %q:\n%s", want, out)
		}
	}
	out = cli("channel", "bounds", "orders/0")
	if !strings.Contains(out, "MIN") || !strings.Contains(out, "orders/0  0    5") {
		t.Fatalf("bounds:\n%s", out)
	}

	// Errors: usage (exit 2) before any request, API errors (exit 1) with
	// the API's code and message.
	fails(2, `LOGIC_OFFSET: want a non-negative integer, got "abc"`, "topic", "translate", "orders/0", "abc")
	fails(2, `PHYSICAL_OFFSET: want a non-negative integer, got "1x"`, "topic", "translate", "--physical", "a/1", "1x")
	fails(2, `physical queue "a": want BROKER/QUEUE_ID`, "topic", "translate", "--physical", "a", "1")
	fails(2, "accepts 2 arg(s)", "topic", "translate", "orders/0")
	fails(1, "offset_out_of_range", "topic", "translate", "orders/0", "5")
	fails(1, "not mapped by any topic", "topic", "translate", "--physical", "a/999999", "0")
	fails(2, `VCHANNEL "orders": want topic/N`, "topic", "translate", "orders", "1")
	fails(2, `VCHANNEL "x": want topic/N`, "group", "get", "g", "x")
	fails(2, `VCHANNEL "x/01": want topic/N`, "channel", "read", "x/01")
	fails(2, "GROUP: must not be empty", "group", "commit", "", "orders/0", "1")
	fails(2, "--limit: want 1..1000, got 0", "channel", "read", "orders/0", "--limit", "0")
	fails(2, "--retention-age: want a duration >= 0", "topic", "create", "neg", "--queues", "1", "--retention-age", "-1s")
	// An API error is not a usage error, even when it says "invalid argument".
	fails(1, "invalid_argument (400 Bad Request): mapping: invalid argument: queues must be 1..", "topic", "create", "zero", "--queues", "0")
	fails(1, "not_found", "topic", "translate", "nope/0", "0")
	fails(2, `OFFSET: want a non-negative integer, got "x"`, "group", "commit", "g", "orders/0", "x")
	fails(1, "not_found", "channel", "bounds", "nope/0")

	out = cli("topic", "delete", "orders", "--dry-run")
	if !strings.Contains(out, "delete") {
		t.Fatalf("delete dry run:\n%s", out)
	}
	cli("topic", "describe", "orders") // still there
	cli("group", "commit", "g", "orders/0", "2")
	cli("topic", "delete", "orders")
	cli("topic", "create", "orders", "--queues", "1")
	out = cli("group", "get", "g", "orders/0", "-o", "json")
	var g client.GroupOffset
	if err := json.Unmarshal([]byte(out), &g); err != nil || g.Committed {
		t.Fatalf("group offset after delete + create: %s %v", out, err)
	}
	d.stop(t)
}

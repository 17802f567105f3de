package wasm

import (
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hostd-dev/hostd/internal/wasmtest"
	"github.com/hostd-dev/hostd/runtime/sched"
	"github.com/hostd-dev/hostd/sdk/abi"
)

func badptrWasm(t testing.TB) string { return wasmtest.Build(t, "testdata/badptr") }

// Issue 12: out-of-bounds pointers to log, set_error, span_event,
// span_attrs and take were silently ignored; they now fail the call like
// set_output does (bad_output, naming the host call), and the instance
// stays usable.
func TestOutOfBoundsHostCallsFailTheCall(t *testing.T) {
	r := mustRuntime(t, Config{Plugins: []Spec{{Name: "badptr", Path: badptrWasm(t)}}, Defaults: Limits{PoolSize: 1}})
	for _, fn := range []string{"log", "set_error", "span_event", "span_event_attrs", "span_attrs", "take"} {
		_, err := r.Ack(bg, msg("BadPtr", fn))
		want := strings.TrimSuffix(fn, "_attrs")
		if fn == "span_attrs" {
			want = "span_attrs"
		}
		if KindOf(err) != KindBadOutput || !strings.Contains(err.Error(), want+": ") || !strings.Contains(err.Error(), "out of bounds") {
			t.Fatalf("%s with an out-of-bounds pointer: %v, want bad_output naming %s", fn, err, want)
		}
		if _, err := r.Ack(bg, msg("BadPtr", "ok")); err != nil {
			t.Fatalf("the next call after %s: %v", fn, err)
		}
	}
}

// Issue 12: a scan whose `after` sorts past every key with the prefix made
// the callback's commit fail for good (range check: start > end). It is a
// clean empty scan, and the callback commits.
func TestKVScanAfterBeyondPrefix(t *testing.T) {
	store := openStore(t)
	r := mustRuntime(t, Config{Plugins: []Spec{{Name: "badptr", Path: badptrWasm(t)}}, Store: store, Defaults: Limits{PoolSize: 1}})
	res, err := r.Ack(bg, msg("BadPtr", "scanpast p/"))
	if err != nil {
		t.Fatal(err)
	}
	if err := commit(bg, store, res); err != nil {
		t.Fatalf("commit of a callback that scanned past its prefix: %v", err)
	}
	// The operator's scan too.
	if entries, next, err := r.KVScan(bg, "badptr", []byte("p/"), []byte("p/\xff\xff"), 10); err != nil || len(entries) != 0 || next != nil {
		t.Fatalf("operator scan past the prefix: %v %q %v", entries, next, err)
	}
}

// Issue 12: plugin log levels are clamped to debug..error (a guest logged
// at ERROR+992), and a plugin's log lines are rate-limited: at most 50 per
// 10 s, then one warning with the count of suppressed lines.
func TestPluginLogsAreClampedAndRateLimited(t *testing.T) {
	rec := &recorder{}
	clock := sched.NewFakeClock(time.Unix(1000, 0))
	r := mustRuntime(t, Config{Plugins: []Spec{{Name: "badptr", Path: badptrWasm(t)}}, Logger: slog.New(rec), Clock: clock, Defaults: Limits{PoolSize: 1}})
	if _, err := r.Ack(bg, msg("BadPtr", "loglevel")); err != nil {
		t.Fatal(err)
	}
	var levels []slog.Level
	rec.mu.Lock()
	for _, x := range rec.recs {
		if x.Message == "loud" {
			levels = append(levels, x.Level)
		}
	}
	rec.mu.Unlock()
	if len(levels) != 2 || levels[0] != slog.LevelError || levels[1] != slog.LevelDebug {
		t.Fatalf("levels %v, want [ERROR DEBUG]", levels)
	}
	for range 3 {
		if _, err := r.Ack(bg, msg("BadPtr", "spam")); err != nil {
			t.Fatal(err)
		}
	}
	count := func(m string) int {
		rec.mu.Lock()
		defer rec.mu.Unlock()
		n := 0
		for _, x := range rec.recs {
			if x.Message == m {
				n++
			}
		}
		return n
	}
	if n := count("spam line"); n != 48 { // 50 per window, 2 used by "loud"
		t.Fatalf("%d spam lines logged in one window, want 48", n)
	}
	clock.Advance(11 * time.Second)
	if _, err := r.Ack(bg, msg("BadPtr", "spam")); err != nil {
		t.Fatal(err)
	}
	got, ok := rec.find("plugin log lines suppressed")
	if !ok || attrOf(got, "plugin") != "badptr" || attrOf(got, "suppressed") != "1452" {
		t.Fatalf("suppression summary: %v %v", ok, got)
	}
	if n := count("spam line"); n != 98 {
		t.Fatalf("%d spam lines after a new window, want 98", n)
	}
}

// hostd_alloc returning 0 is an allocation failure: the call fails (trap,
// retryable, the instance is replaced) instead of hostd writing the input
// at address 0 over the guest's own data.
func TestAllocReturningZeroFailsTheCall(t *testing.T) {
	path := filepath.Join(t.TempDir(), "raw0.wasm")
	if err := os.WriteFile(path, rawModuleWith(int32(abi.KindAck), 0), 0o644); err != nil {
		t.Fatal(err)
	}
	r := mustRuntime(t, Config{Plugins: []Spec{{Name: "raw0", Path: path, Limits: Limits{MemoryLimit: 1 << 20}}}, Defaults: Limits{PoolSize: 1}})
	_, err := r.ResourceKeys(bg, msg("Raw", "{}"))
	if KindOf(err) != KindTrap || IsPermanent(err) || !strings.Contains(err.Error(), "hostd_alloc(4096) returned 0") {
		t.Fatalf("alloc returning 0: %v", err)
	}
}

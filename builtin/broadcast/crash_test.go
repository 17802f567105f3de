package broadcast

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hostd-dev/hostd/runtime/failpoint"
	"github.com/hostd-dev/hostd/sdk/abi"
)

// The crash points of package doc, each killed (SIGKILL, no deferred code)
// in a child process and then recovered in this one.
var crashPoints = []string{
	"broadcast.after-persist",
	"broadcast.mid-append",
	"broadcast.after-acks",
	"broadcast.mid-callback",
	"broadcast.before-tombstone",
	"broadcast.after-tombstone",
}

const crashN = 12

var (
	crashBinOnce sync.Once
	crashBin     string
	crashBinErr  error
)

// failpointBinary returns a test binary of this package built with
// -tags failpoints (this one, if it already is).
func failpointBinary(t *testing.T) string {
	if failpoint.Enabled {
		p, err := os.Executable()
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	crashBinOnce.Do(func() {
		dir, err := os.MkdirTemp("", "bc-crash")
		if err != nil {
			crashBinErr = err
			return
		}
		crashBin = filepath.Join(dir, "broadcast.test")
		out, err := exec.Command("go", "test", "-c", "-tags", "failpoints", "-o", crashBin, ".").CombinedOutput()
		if err != nil {
			crashBinErr = fmt.Errorf("build failpoint binary: %v\n%s", err, out)
		}
	})
	if crashBinErr != nil {
		t.Fatal(crashBinErr)
	}
	return crashBin
}

func crashRequest(i int) Request {
	return Request{Message: Message{Type: "count", Payload: []byte(fmt.Sprint(i))}, VChannels: vcs(3),
		IdempotencyKey: fmt.Sprintf("req-%d", i),
		ResourceKeys:   []abi.ResourceKey{key("collection", fmt.Sprint("c", i%4), abi.Exclusive)}}
}

// TestCrashChild is the child side of TestScenario9CrashPoints: it only
// does something when started by it (HOSTD_BC_CRASH_DIR set).
func TestCrashChild(t *testing.T) {
	dir := os.Getenv("HOSTD_BC_CRASH_DIR")
	if dir == "" {
		return
	}
	v := newCrashEnv(t, dir)
	submitCrashRequests(v)
	fmt.Println("CHILD-FINISHED-WITHOUT-CRASH")
}

// newCrashEnv opens the crash children's engine on dir with the counting
// "count" type that crashRequest submits.
func newCrashEnv(t *testing.T, dir string) *env {
	var runs atomic.Int32
	ref := &storeRef{}
	return newEnvAt(t, dir, vcs(3), ref.set, func(e *Engine) {
		e.Register("count", counterHandler(ref.get, &runs), TypeOptions{})
	})
}

// submitCrashRequests submits crashRequest 0..crashN-1 concurrently and
// waits for every Submit to return (or the failpoint to kill the process).
func submitCrashRequests(v *env) {
	var wg sync.WaitGroup
	for i := 0; i < crashN; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			r := crashRequest(i)
			v.e.Submit(context.Background(), &r)
		}(i)
	}
	wg.Wait()
}

// Scenario 9: kill -9 at every step; after restart every task completes
// exactly once and plugin KV effects are applied once.
func TestScenario9CrashPoints(t *testing.T) {
	bin := failpointBinary(t)
	for _, point := range crashPoints {
		t.Run(point, func(t *testing.T) {
			dir := t.TempDir()
			logf := filepath.Join(dir, "fp.log")
			data := filepath.Join(dir, "data")
			cmd := exec.Command(bin, "-test.run=^TestCrashChild$", "-test.count=1")
			cmd.Env = append(os.Environ(), "HOSTD_BC_CRASH_DIR="+data,
				"HOSTD_FAILPOINTS="+point+"=crash@3", "HOSTD_FAILPOINTS_LOG="+logf)
			out, err := cmd.CombinedOutput()
			if err == nil || strings.Contains(string(out), "CHILD-FINISHED-WITHOUT-CRASH") {
				t.Fatalf("child did not crash at %s: %v\n%s", point, err, out)
			}
			hits, _ := os.ReadFile(logf)
			if n := strings.Count(string(hits), point+"\n"); n < 3 {
				t.Fatalf("%s hit %d times, want >= 3", point, n)
			}
			// Restart in this process and retry every request as a client would.
			var runs atomic.Int32
			ref := &storeRef{}
			v := newEnvAt(t, data, vcs(3), ref.set, func(e *Engine) {
				e.Register("count", counterHandler(ref.get, &runs), TypeOptions{})
			})
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			ids := map[uint64]bool{}
			for i := 0; i < crashN; i++ {
				r := crashRequest(i)
				res, err := v.e.Submit(ctx, &r)
				if err != nil || res.State != StateTombstone {
					t.Fatalf("request %d after restart: %+v %v", i, res, err)
				}
				if ids[res.ID] {
					t.Fatalf("two requests share ID %d", res.ID)
				}
				ids[res.ID] = true
			}
			if l, _ := v.e.List(Filter{}); len(l) != crashN {
				t.Fatalf("%d tasks, want %d", len(l), crashN)
			}
			if n := readCounter(t, v.store); n != crashN {
				t.Fatalf("counter %d, want %d: a KV effect was lost or applied twice", n, crashN)
			}
			per := v.assertNoDuplicates(vcs(3)...)
			for id := range ids {
				if per[id] != 1 {
					t.Fatalf("broadcast %d on the control channel %d times", id, per[id])
				}
			}
			if snap := v.locker.Snapshot(); len(snap) != 0 {
				t.Fatalf("locks left held: %+v", snap)
			}
		})
	}
}

package locks

import (
	"bufio"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hostd-dev/hostd/sdk/abi"
)

// TestScenarioScripts runs testdata/scenarios/*.txt: scripts that read like
// the acceptance list of locks.md, against the real service (Badger in a
// temp dir, fake clock). Each line is a command, optionally followed by
// "=> expected"; expected is an error code ("ok", "locked", ...) or, for
// holders, the owners. Commands:
//
//	acquire LABEL OWNER KEY... [ttl=D] [shared=KEY]   (KEY = domain:key)
//	renew LABEL [ttl=D] [token=T] | release LABEL [token=T]
//	check-fence KEY LABEL | holders KEY | force-release KEY REASON
//	fence LABEL < LABEL | advance D | stepwall D | restart
func TestScenarioScripts(t *testing.T) {
	files, err := filepath.Glob("testdata/scenarios/*.txt")
	if err != nil || len(files) == 0 {
		t.Fatalf("no scenario scripts: %v", err)
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) { runScript(t, f) })
	}
}

func parseScriptKey(t *testing.T, s string, mode abi.LockMode) abi.ResourceKey {
	t.Helper()
	d, k, ok := strings.Cut(s, ":")
	if !ok {
		t.Fatalf("bad key %q", s)
	}
	return abi.ResourceKey{Domain: d, Key: k, Mode: mode}
}

func runScript(t *testing.T, path string) {
	e := newLeaseEnv(t, true)
	grants := map[string]*Grant{}
	fences := map[string]uint64{} // fence of every grant or force-release label
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	ctx := context.Background()
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		cmdPart, want, hasWant := strings.Cut(line, "=>")
		want = strings.TrimSpace(want)
		args := strings.Fields(cmdPart)
		opts := map[string]string{}
		var pos []string
		for _, a := range args[1:] {
			if k, v, ok := strings.Cut(a, "="); ok {
				opts[k] = v
			} else {
				pos = append(pos, a)
			}
		}
		dur := func(s string) time.Duration {
			if s == "" {
				return 0
			}
			d, err := time.ParseDuration(s)
			if err != nil {
				t.Fatalf("%s:%d: bad duration %q", path, n, s)
			}
			return d
		}
		got := ""
		switch args[0] {
		case "acquire":
			req := AcquireRequest{Owner: pos[1], TTL: dur(opts["ttl"])}
			for _, k := range pos[2:] {
				req.Keys = append(req.Keys, parseScriptKey(t, k, abi.Exclusive))
			}
			if s := opts["shared"]; s != "" {
				req.Keys = append(req.Keys, parseScriptKey(t, s, abi.Shared))
			}
			g, err := e.svc.Acquire(ctx, req)
			if err == nil {
				grants[pos[0]] = g
				fences[pos[0]] = g.Fence
			}
			got = ErrorCode(err)
		case "renew", "release":
			g := grants[pos[0]]
			if g == nil {
				t.Fatalf("%s:%d: unknown grant %s", path, n, pos[0])
			}
			tok := g.Token
			if v, ok := opts["token"]; ok {
				tok = v
			}
			if args[0] == "renew" {
				_, err = e.svc.Renew(ctx, g.ID, tok, dur(opts["ttl"]))
			} else {
				err = e.svc.Release(ctx, g.ID, tok)
			}
			got = ErrorCode(err)
		case "check-fence":
			got = ErrorCode(e.svc.CheckFence(parseScriptKey(t, pos[0], 0), fences[pos[1]]))
		case "holders":
			kv, err := e.svc.Inspect(parseScriptKey(t, pos[0], 0))
			if err != nil {
				t.Fatal(err)
			}
			var owners []string
			for _, h := range kv.Holders {
				owners = append(owners, h.Owner)
			}
			got = strings.Join(owners, ",")
			if got == "" {
				got = "-"
			}
		case "force-release":
			res, err := e.svc.ForceRelease(ctx, parseScriptKey(t, pos[0], 0), "", strings.Join(pos[1:], " "), "script")
			if err == nil {
				fences["forced:"+pos[0]] = res.Fence
			}
			got = ErrorCode(err)
		case "fence":
			if len(pos) != 3 || pos[1] != "<" {
				t.Fatalf("%s:%d: want fence A < B", path, n)
			}
			if !(fences[pos[0]] < fences[pos[2]]) {
				t.Fatalf("%s:%d: fence %s=%d is not below %s=%d", path, n, pos[0], fences[pos[0]], pos[2], fences[pos[2]])
			}
			continue
		case "advance":
			e.clock.Advance(dur(pos[0]))
			continue
		case "stepwall":
			e.clock.StepWall(dur(pos[0]))
			continue
		case "restart":
			e.restart()
			continue
		default:
			t.Fatalf("%s:%d: unknown command %q", path, n, args[0])
		}
		if !hasWant {
			t.Fatalf("%s:%d: %q needs \"=> expected\"", path, n, line)
		}
		if got != want {
			t.Fatalf("%s:%d: %s\n got  %s\n want %s", path, n, strings.TrimSpace(cmdPart), got, want)
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
}

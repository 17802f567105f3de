//go:build failpoints

package failpoint

import (
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Enabled reports whether failpoints are compiled in.
const Enabled = true

type point struct {
	crashAt int           // hit number that crashes (1-based); 0 = never
	sleep   time.Duration // every hit waits this long ("sleep:2s")
	hits    int
}

var (
	mu      sync.Mutex
	points  map[string]*point
	actions = map[string]func(){}
	logFile *os.File
)

func init() {
	points = parse(os.Getenv("HOSTD_FAILPOINTS"))
	if p := os.Getenv("HOSTD_FAILPOINTS_LOG"); p != "" {
		f, err := os.OpenFile(p, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
		if err == nil {
			logFile = f
		}
	}
}

func parse(spec string) map[string]*point {
	m := map[string]*point{}
	for _, part := range strings.Split(spec, ";") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		name, action, _ := strings.Cut(part, "=")
		p := &point{}
		if a, n, ok := strings.Cut(action, "@"); ok && a == "crash" {
			if v, err := strconv.Atoi(n); err == nil && v > 0 {
				p.crashAt = v
			}
		} else if action == "crash" {
			p.crashAt = 1
		} else if d, ok := strings.CutPrefix(action, "sleep:"); ok {
			if v, err := time.ParseDuration(d); err == nil && v > 0 {
				p.sleep = v
			}
		}
		m[name] = p
	}
	return m
}

// Hit marks a named crash point: logs the hit and runs its action.
func Hit(name string) {
	mu.Lock()
	if logFile != nil {
		_, _ = logFile.WriteString(name + "\n")
	}
	fn := actions[name]
	p := points[name]
	crash, sleep := false, time.Duration(0)
	if p != nil {
		p.hits++
		crash = p.crashAt > 0 && p.hits == p.crashAt
		sleep = p.sleep
	}
	mu.Unlock()
	if fn != nil {
		fn()
	}
	if sleep > 0 {
		time.Sleep(sleep)
	}
	if crash {
		if logFile != nil {
			_ = logFile.Sync()
		}
		_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
		select {} // wait for the signal
	}
}

// Set installs an in-process action for a point (tests only).
func Set(name string, fn func()) {
	mu.Lock()
	defer mu.Unlock()
	actions[name] = fn
}

// Reset removes all in-process actions.
func Reset() {
	mu.Lock()
	defer mu.Unlock()
	actions = map[string]func(){}
}

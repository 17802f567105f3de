package e2e

import (
	"path/filepath"
	"sync"
	"testing"

	"github.com/hostd-dev/hostd/internal/natstest"
)

var (
	natsBinOnce sync.Once
	natsBin     string
	natsBinErr  error
)

// startNATSProcs starts the 3 nats-server processes of a JetStream e2e
// test (internal/natstest.Procs: they can be killed like crashed
// machines), building nats-server once per test binary; on failure it
// prints the tail of each server's log.
func startNATSProcs(t *testing.T) *natstest.Procs {
	t.Helper()
	natsBinOnce.Do(func() { natsBin, natsBinErr = natstest.BuildServer(filepath.Dir(hostdBin)) })
	if natsBinErr != nil {
		t.Fatal(natsBinErr)
	}
	c := natstest.StartProcs(t, natsBin)
	t.Cleanup(func() {
		if t.Failed() {
			for i := range 3 {
				t.Logf("nats-server n%d's log ends:\n%s", i, tail(c.LogPath(i)))
			}
		}
	})
	return c
}

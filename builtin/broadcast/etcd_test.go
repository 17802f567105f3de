package broadcast

import (
	"context"
	"fmt"
	"sync"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/hostd-dev/hostd/internal/etcdtest"
	"github.com/hostd-dev/hostd/runtime/catalog"
	"github.com/hostd-dev/hostd/runtime/catalog/etcdcat"
)

// etcdCatalogs opens etcd catalogs for env.open while TestOnEtcd runs.
type etcdCatalogs struct {
	cli      *clientv3.Client
	mu       sync.Mutex
	prefixes map[string]string // data dir -> prefix
}

var onEtcd *etcdCatalogs

func (e *etcdCatalogs) open(dir string) (catalog.Store, error) {
	e.mu.Lock()
	p, ok := e.prefixes[dir]
	if !ok {
		p = fmt.Sprintf("/broadcast%d/", len(e.prefixes))
		e.prefixes[dir] = p
	}
	e.mu.Unlock()
	return etcdcat.Open(context.Background(), etcdcat.Options{Client: e.cli, Prefix: p})
}

// TestOnEtcd runs a subset of the broadcast engine's scenario tests on
// the etcd catalog (one embedded etcd, a prefix per test): scenarios 1-8,
// 10, 11 and 14 (conflict serialization, opposite order, flaky appends,
// locks freed, same-key concurrency, key scope, duplicate waits and
// duplicates of failed tasks, GC, ack sync-up, the exact counter). Crash
// children, forged records, size limits of Badger, tracing and throughput
// tests stay Badger-only.
func TestOnEtcd(t *testing.T) {
	if testing.Short() {
		t.Skip("starts an etcd")
	}
	c := etcdtest.Start(t, etcdtest.Options{})
	onEtcd = &etcdCatalogs{cli: c.Client(t), prefixes: map[string]string{}}
	defer func() { onEtcd = nil }()
	for _, tc := range []struct {
		name string
		fn   func(*testing.T)
	}{
		{"Scenario1ConflictSerializesNonConflictOverlaps", TestScenario1ConflictSerializesNonConflictOverlaps},
		{"Scenario2OppositeOrderNoDeadlock", TestScenario2OppositeOrderNoDeadlock},
		{"Scenario3FlakyAppends", TestScenario3FlakyAppends},
		{"Scenario4LocksFreedWithoutBroadcast", TestScenario4LocksFreedWithoutBroadcast},
		{"Scenario5ConcurrentSameKey", TestScenario5ConcurrentSameKey},
		{"Scenario6KeyScopeAndType", TestScenario6KeyScopeAndType},
		{"Scenario7DuplicateWaitsTimeout", TestScenario7DuplicateWaitsTimeout},
		{"Scenario8DuplicateOfFailed", TestScenario8DuplicateOfFailed},
		{"Scenario10GC", TestScenario10GC},
		{"Scenario11AckSyncUp", TestScenario11AckSyncUp},
		{"Scenario14CounterExact", TestScenario14CounterExact},
	} {
		t.Run(tc.name, tc.fn)
	}
}

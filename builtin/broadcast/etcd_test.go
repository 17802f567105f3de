package broadcast

import (
	"testing"

	"github.com/hostd-dev/hostd/internal/etcdcattest"
)

var onEtcd *etcdcattest.Catalogs // set while TestOnEtcd runs

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
	onEtcd = etcdcattest.Start(t, "broadcast")
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

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
	etcdcattest.Run(t, "broadcast", func(c *etcdcattest.Catalogs) { onEtcd = c },
		TestScenario1ConflictSerializesNonConflictOverlaps,
		TestScenario2OppositeOrderNoDeadlock,
		TestScenario3FlakyAppends,
		TestScenario4LocksFreedWithoutBroadcast,
		TestScenario5ConcurrentSameKey,
		TestScenario6KeyScopeAndType,
		TestScenario7DuplicateWaitsTimeout,
		TestScenario8DuplicateOfFailed,
		TestScenario10GC,
		TestScenario11AckSyncUp,
		TestScenario14CounterExact,
	)
}

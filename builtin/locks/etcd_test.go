package locks

import (
	"testing"

	"github.com/hostd-dev/hostd/internal/etcdcattest"
)

var onEtcd *etcdcattest.Catalogs // set while TestOnEtcd runs

// TestOnEtcd runs a subset of the lease service's tests on the etcd
// catalog (one embedded etcd, a prefix per test): every scenario script,
// the numbered scenarios that exercise the catalog (1 expiry and fencing,
// 2 renew, 3 multi-key all-or-nothing, 7 restart, 9 force release with a
// fence check inside a catalog commit, 12 many keys), idempotent acquire,
// records gone after every end, idempotency per principal, a takeover
// keeping grants expired on its own clock. The rest are
// about in-memory waiters or clocks and gain nothing from a second
// backend.
func TestOnEtcd(t *testing.T) {
	etcdcattest.Run(t, "locks", func(c *etcdcattest.Catalogs) { onEtcd = c },
		TestScenarioScripts,
		TestLeaseScenario1ExpiryAndFencing,
		TestLeaseScenario2Renew,
		TestLeaseScenario3MultiKeyAllOrNothing,
		TestLeaseScenario7Restart,
		TestLeaseScenario9ForceRelease,
		TestLeaseScenario12ManyKeys,
		TestLeaseIdempotentAcquire,
		TestLeaseRecordsGoneAfterEveryEnd,
		TestLeaseIdempotencyIsPerPrincipal,
		TestLeaseTakeoverKeepsGrantsExpiredOnThisClock,
	)
}

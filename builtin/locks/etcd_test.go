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
	if testing.Short() {
		t.Skip("starts an etcd")
	}
	onEtcd = etcdcattest.Start(t, "locks")
	defer func() { onEtcd = nil }()
	for _, tc := range []struct {
		name string
		fn   func(*testing.T)
	}{
		{"ScenarioScripts", TestScenarioScripts},
		{"Scenario1ExpiryAndFencing", TestLeaseScenario1ExpiryAndFencing},
		{"Scenario2Renew", TestLeaseScenario2Renew},
		{"Scenario3MultiKeyAllOrNothing", TestLeaseScenario3MultiKeyAllOrNothing},
		{"Scenario7Restart", TestLeaseScenario7Restart},
		{"Scenario9ForceRelease", TestLeaseScenario9ForceRelease},
		{"Scenario12ManyKeys", TestLeaseScenario12ManyKeys},
		{"IdempotentAcquire", TestLeaseIdempotentAcquire},
		{"RecordsGoneAfterEveryEnd", TestLeaseRecordsGoneAfterEveryEnd},
		{"IdempotencyIsPerPrincipal", TestLeaseIdempotencyIsPerPrincipal},
		{"TakeoverKeepsGrantsExpiredOnThisClock", TestLeaseTakeoverKeepsGrantsExpiredOnThisClock},
	} {
		t.Run(tc.name, tc.fn)
	}
}

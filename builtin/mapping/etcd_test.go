package mapping_test

import (
	"testing"

	"github.com/hostd-dev/hostd/internal/etcdcattest"
)

var onEtcd *etcdcattest.Catalogs // set while TestOnEtcd runs

// TestOnEtcd runs a subset of the mapping's scenario tests on the etcd
// catalog (one embedded etcd, a prefix per test): scenarios 1-8 (create
// and grow, remaps, rejections, appends during a remap, timestamp lookup,
// retention), producer idempotency across a restart, topic deletion and
// waits that follow a remap. Tests that corrupt Badger records, hammer or
// benchmark stay Badger-only.
func TestOnEtcd(t *testing.T) {
	if testing.Short() {
		t.Skip("starts an etcd")
	}
	onEtcd = etcdcattest.Start(t, "mapping")
	defer func() { onEtcd = nil }()
	for _, tc := range []struct {
		name string
		fn   func(*testing.T)
	}{
		{"Scenario1CreateGrow", TestScenario1CreateGrow},
		{"Scenario2RemapContinues", TestScenario2RemapContinues},
		{"Scenario3RemapChain", TestScenario3RemapChain},
		{"Scenario4RemapSame", TestScenario4RemapSame},
		{"Scenario5Rejections", TestScenario5Rejections},
		{"Scenario6ConcurrentAppendsDuringRemap", TestScenario6ConcurrentAppendsDuringRemap},
		{"Scenario7TimestampLookup", TestScenario7TimestampLookup},
		{"Scenario8Retention", TestScenario8Retention},
		{"ProducerIdempotency", TestProducerIdempotency},
		{"DeleteTopic", TestDeleteTopic},
		{"WaitFollowsRemap", TestWaitFollowsRemap},
	} {
		t.Run(tc.name, tc.fn)
	}
}

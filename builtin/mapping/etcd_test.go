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
	etcdcattest.Run(t, "mapping", func(c *etcdcattest.Catalogs) { onEtcd = c },
		TestScenario1CreateGrow,
		TestScenario2RemapContinues,
		TestScenario3RemapChain,
		TestScenario4RemapSame,
		TestScenario5Rejections,
		TestScenario6ConcurrentAppendsDuringRemap,
		TestScenario7TimestampLookup,
		TestScenario8Retention,
		TestProducerIdempotency,
		TestDeleteTopic,
		TestWaitFollowsRemap,
	)
}

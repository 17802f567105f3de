package mapping_test

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

// etcdCatalogs opens etcd catalogs for openEnv while TestOnEtcd runs.
type etcdCatalogs struct {
	cli      *clientv3.Client
	mu       sync.Mutex
	prefixes map[string]string // data dir -> prefix
}

var onEtcd *etcdCatalogs

func (e *etcdCatalogs) open(t testing.TB, dir string) catalog.Store {
	t.Helper()
	e.mu.Lock()
	p, ok := e.prefixes[dir]
	if !ok {
		p = fmt.Sprintf("/mapping%d/", len(e.prefixes))
		e.prefixes[dir] = p
	}
	e.mu.Unlock()
	s, err := etcdcat.Open(context.Background(), etcdcat.Options{Client: e.cli, Prefix: p})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

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
	c := etcdtest.Start(t, etcdtest.Options{})
	onEtcd = &etcdCatalogs{cli: c.Client(t), prefixes: map[string]string{}}
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

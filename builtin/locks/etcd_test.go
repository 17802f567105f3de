package locks

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/hostd-dev/hostd/internal/etcdtest"
	"github.com/hostd-dev/hostd/runtime/catalog"
	"github.com/hostd-dev/hostd/runtime/catalog/etcdcat"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// etcdCatalogs opens etcd catalogs for openStore while TestOnEtcd runs.
type etcdCatalogs struct {
	cli      *clientv3.Client
	mu       sync.Mutex
	prefixes map[string]string // data dir -> prefix
}

var onEtcd *etcdCatalogs

func (e *etcdCatalogs) open(t *testing.T, dir string) catalog.Store {
	t.Helper()
	e.mu.Lock()
	p, ok := e.prefixes[dir]
	if !ok {
		p = fmt.Sprintf("/locks%d/", len(e.prefixes))
		e.prefixes[dir] = p
	}
	e.mu.Unlock()
	s, err := etcdcat.Open(context.Background(), etcdcat.Options{Client: e.cli, Prefix: p})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestOnEtcd runs a subset of the lease service's tests on the etcd
// catalog (one embedded etcd, a prefix per test): every scenario script,
// the numbered scenarios that exercise the catalog (1 expiry and fencing,
// 2 renew, 3 multi-key all-or-nothing, 7 restart, 9 force release with a
// fence check inside a catalog commit, 12 many keys), idempotent acquire,
// records gone after every end, idempotency per principal. The rest are
// about in-memory waiters or clocks and gain nothing from a second
// backend.
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
	} {
		t.Run(tc.name, tc.fn)
	}
}

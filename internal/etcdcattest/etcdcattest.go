// Package etcdcattest runs a package's catalog tests again on the etcd
// catalog: it starts one embedded etcd (internal/etcdtest) and hands out
// etcd catalogs (runtime/catalog/etcdcat) on it, one key prefix per name —
// typically per test data dir, so that a test that reopens "its" catalog
// gets the same state back. Tests only.
//
//	onEtcd = etcdcattest.Start(t, "locks")   // in a TestOnEtcd
//	store, err := onEtcd.Open(dir)           // where the test opened Badger
package etcdcattest

import (
	"context"
	"fmt"
	"reflect"
	"runtime"
	"strings"
	"sync"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/hostd-dev/hostd/internal/etcdtest"
	"github.com/hostd-dev/hostd/runtime/catalog"
	"github.com/hostd-dev/hostd/runtime/catalog/etcdcat"
)

// Catalogs opens etcd catalogs on one embedded etcd.
type Catalogs struct {
	cli      *clientv3.Client
	name     string
	mu       sync.Mutex
	prefixes map[string]string // name -> prefix
}

// Start starts an etcd that stops at t's cleanup; prefixes are
// "/<name><n>/".
func Start(t testing.TB, name string) *Catalogs {
	t.Helper()
	c := etcdtest.Start(t, etcdtest.Options{})
	return &Catalogs{cli: c.Client(t), name: name, prefixes: map[string]string{}}
}

// Open opens the catalog of key (a fresh prefix the first time, the same
// one after). The caller closes it.
func (c *Catalogs) Open(key string) (catalog.Store, error) {
	c.mu.Lock()
	p, ok := c.prefixes[key]
	if !ok {
		p = fmt.Sprintf("/%s%d/", c.name, len(c.prefixes))
		c.prefixes[key] = p
	}
	c.mu.Unlock()
	return etcdcat.Open(context.Background(), etcdcat.Options{Client: c.cli, Prefix: p})
}

// MustOpen is Open failing t on error.
func (c *Catalogs) MustOpen(t testing.TB, key string) catalog.Store {
	t.Helper()
	s, err := c.Open(key)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// Run runs tests again on etcd: it skips under -short, starts an etcd,
// hands its Catalogs to use (the package stores it where its open helper
// looks, and gets nil back at the end) and runs each test as a subtest
// named after the function ("TestScenario1X" runs as "Scenario1X").
func Run(t *testing.T, name string, use func(*Catalogs), tests ...func(*testing.T)) {
	t.Helper()
	if testing.Short() {
		t.Skip("starts an etcd")
	}
	use(Start(t, name))
	defer use(nil)
	for _, fn := range tests {
		full := runtime.FuncForPC(reflect.ValueOf(fn).Pointer()).Name()
		sub := strings.TrimPrefix(full[strings.LastIndex(full, ".")+1:], "Test")
		t.Run(sub, fn)
	}
}

package etcdcat

import (
	"testing"
	"time"

	"go.uber.org/goleak"
)

// TestMain checks that stores (and the etcd clients and servers of the
// tests) leave no goroutine behind.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func runtimeGosched() { time.Sleep(time.Millisecond) }

package catalog

import (
	_ "example.com/bad/runtime/sched"
	_ "example.com/bad/runtime/wal"
	_ "github.com/dgraph-io/badger/v4"
)

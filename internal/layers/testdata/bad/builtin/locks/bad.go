package locks

import (
	_ "example.com/bad/builtin/broadcast"
	_ "example.com/bad/host"
	_ "github.com/dgraph-io/badger/v4"
	_ "go.opentelemetry.io/otel/sdk/trace"
)

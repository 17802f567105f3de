package locks

import (
	_ "context"

	_ "example.com/bad/runtime/catalog"
	_ "example.com/bad/sdk/abi"
	_ "go.opentelemetry.io/otel/trace"
)

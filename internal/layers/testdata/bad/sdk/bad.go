//go:build wasip1

package sdk

import (
	_ "example.com/bad/runtime/catalog"
	_ "example.com/bad/sdk/abi"
)

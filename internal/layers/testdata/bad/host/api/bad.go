package api

import (
	_ "example.com/bad/cmd/hostd"
	_ "example.com/bad/runtime/catalog"
	_ "github.com/knadh/koanf/v2"
	_ "github.com/tetratelabs/wazero"
)

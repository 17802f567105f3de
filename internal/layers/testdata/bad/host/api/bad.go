package api

import (
	_ "example.com/bad/cmd/hostd"
	_ "example.com/bad/runtime/catalog"
	_ "example.com/bad/wire" // allowed: host uses the wire types
	_ "github.com/knadh/koanf/v2"
	_ "github.com/tetratelabs/wazero"
)

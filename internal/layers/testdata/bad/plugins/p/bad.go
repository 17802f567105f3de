package main

import (
	_ "example.com/bad/builtin/locks"
	_ "example.com/bad/sdk"
	_ "github.com/google/go-cmp/cmp"
)

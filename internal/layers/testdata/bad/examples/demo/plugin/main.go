package main

import (
	_ "example.com/bad/runtime/catalog"
	_ "example.com/bad/sdk"
)

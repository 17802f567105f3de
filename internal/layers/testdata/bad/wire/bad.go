package wire

import (
	_ "encoding/json"
	_ "example.com/bad/sdk/abi"
)

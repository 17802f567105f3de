package abi

import _ "example.com/bad/runtime/sched"

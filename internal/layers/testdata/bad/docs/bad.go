package docs

import _ "example.com/bad/runtime/sched"

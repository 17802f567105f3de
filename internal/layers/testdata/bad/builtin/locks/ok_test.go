package locks

import _ "github.com/dgraph-io/badger/v4" // test files are exempt

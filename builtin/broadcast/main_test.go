package broadcast

import (
	"testing"

	"go.uber.org/goleak"
)

// Every test closes what it opened: no engine, WAL, catalog or plugin
// goroutine outlives the package's tests.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// Badger's and glog's package-level goroutines, started once per process.
		goleak.IgnoreTopFunction("github.com/golang/glog.(*fileSink).flushDaemon"),
		goleak.IgnoreTopFunction("go.opencensus.io/stats/view.(*worker).start"),
	)
}

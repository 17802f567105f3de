// Package failing is a benchmark package whose report test fails, for
// run's test: a failed package must show as a "not measured" row.
package failing

import "testing"

func TestReport(t *testing.T) {
	t.Log("measuring something")
	t.Fatal("the measurement failed")
}

// Command flaky is the test plugin of e2e/trace_test.go: its ack callback
// for message type "Flaky" fails on attempts 1 and 2 and succeeds on 3,
// using the attempt number from the envelope. Before the wall-clock time
// in the message property "hang_until_unix_ms", attempt 2 logs
// "flaky: attempt 2 hanging" and sleeps until then, so the test can SIGKILL
// hostd while that attempt is in flight. Every attempt adds a span event.
package main

import (
	"fmt"
	"strconv"
	"time"

	"github.com/hostd-dev/hostd/sdk"
)

func init() {
	sdk.OnAck("Flaky", func(m sdk.Message) error {
		sdk.SpanEvent("flaky.attempt", "attempt", strconv.Itoa(int(m.Attempt)))
		if m.Attempt == 2 {
			if ms, err := strconv.ParseInt(m.Property("hang_until_unix_ms"), 10, 64); err == nil {
				if until := time.UnixMilli(ms); sdk.Now().Before(until) {
					sdk.Info("flaky: attempt 2 hanging", "broadcast", strconv.FormatUint(m.ID, 10))
					time.Sleep(time.Until(until))
				}
			}
		}
		if m.Attempt < 3 {
			return fmt.Errorf("flaky: attempt %d fails", m.Attempt)
		}
		sdk.SpanAttr("flaky.done", "true")
		return nil
	})
}

func main() {}

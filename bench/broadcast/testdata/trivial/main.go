// Command trivial is the benchmark's plugin: an ack callback that does
// nothing, so the benchmark measures the engine, not the plugin.
package main

import "github.com/hostd-dev/hostd/sdk"

func init() {
	sdk.OnAck("Trivial", func(sdk.Message) error { return nil })
}

func main() {}

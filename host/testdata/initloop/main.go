// Command initloop is a test plugin that never finishes initializing: its
// init spins forever (issue 12: it used to hold up daemon startup ~30 s,
// with the API not listening, and was reported as "unreachable").
package main

import "github.com/hostd-dev/hostd/sdk"

var spins uint64

func init() {
	sdk.OnAck("InitLoop", func(sdk.Message) error { return nil })
	for {
		spins++
	}
}

func main() {}

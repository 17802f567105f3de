// Command faults is a test plugin that misbehaves on request: each message
// type fails in one way when its payload says so, and succeeds otherwise
// (so tests can check that the next call works on a fresh instance).
package main

import (
	"unsafe"

	"github.com/hostd-dev/hostd/sdk"
	"github.com/hostd-dev/hostd/sdk/abi"
)

var (
	sink  [][]byte
	sinkN int
)

// fib recurses without a loop of its own.
//
//go:noinline
func fib(n int) int {
	if n < 2 {
		return n
	}
	return fib(n-1) + fib(n-2)
}

func init() {
	sdk.OnAck("Trap", func(m sdk.Message) error {
		if string(m.Payload) == "trap" {
			// An out-of-bounds store: a real Wasm trap, not a Go panic.
			*(*byte)(unsafe.Add(unsafe.Pointer(nil), 0xFFFFFFF0)) = 1
		}
		return nil
	})
	sdk.OnAck("Loop", func(m sdk.Message) error {
		if string(m.Payload) == "loop" {
			for n := 0; ; n++ {
				if n < 0 {
					break
				}
			}
		}
		return nil
	})
	sdk.OnAck("Recurse", func(m sdk.Message) error {
		if string(m.Payload) == "recurse" {
			sinkN = fib(200) // ~2^139 calls: runs until stopped
		}
		return nil
	})
	sdk.OnAck("Stuck", func(m sdk.Message) error {
		// A host call that blocks (the test's store waits for the
		// context), then an endless loop if the host call returns.
		_, _, err := sdk.KVGet("stuck")
		if string(m.Payload) == "stuck" {
			for n := 0; ; n++ {
				if n < 0 {
					break
				}
			}
		}
		return err
	})
	sdk.OnAck("OOM", func(m sdk.Message) error {
		if string(m.Payload) == "oom" {
			for {
				sink = append(sink, make([]byte, 1<<20))
			}
		}
		return nil
	})
	sdk.OnAck("Panic", func(m sdk.Message) error {
		if string(m.Payload) == "panic" {
			panic("boom: the guest panicked")
		}
		return nil
	})
	sdk.ResourceKeys("BigOut", func(m sdk.Message) ([]abi.ResourceKey, error) {
		if string(m.Payload) != "big" {
			return []abi.ResourceKey{{Domain: "d", Key: "k"}}, nil
		}
		keys := make([]abi.ResourceKey, 20000)
		for i := range keys {
			keys[i] = abi.ResourceKey{Domain: "domain", Key: "some-long-key-name"}
		}
		return keys, nil
	})
}

func main() {}

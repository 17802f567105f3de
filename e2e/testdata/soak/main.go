// Command soak is the test plugin of e2e/soak_test.go. Its ack callback for
// message type "SoakEffect" counts how often the broadcast's effect was
// applied, in the plugin KV under "effect/<soak.key>": a read-modify-write,
// so an effect applied twice shows as "2" and a lost one as a missing key.
// The property "soak.fault" injects faults on the first attempt: "trap"
// panics (a Wasm trap), "loop" spins until the call timeout kills the
// instance, "fail" returns an error on attempts 1 and 2.
package main

import (
	"errors"
	"strconv"

	"github.com/hostd-dev/hostd/sdk"
)

var spin uint64

func init() {
	sdk.OnAck("SoakEffect", func(m sdk.Message) error {
		switch m.Properties["soak.fault"] {
		case "trap":
			if m.Attempt == 1 {
				panic("soak: injected trap")
			}
		case "loop":
			if m.Attempt == 1 {
				for {
					spin++
				}
			}
		case "fail":
			if m.Attempt <= 2 {
				return errors.New("soak: injected failure")
			}
		}
		key := "effect/" + m.Properties["soak.key"]
		v, ok, err := sdk.KVGet(key)
		if err != nil {
			return err
		}
		n := 0
		if ok {
			n, _ = strconv.Atoi(string(v))
		}
		return sdk.KVPut(key, []byte(strconv.Itoa(n+1)))
	})
}

func main() {}

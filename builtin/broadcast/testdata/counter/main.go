// Command counter is a test plugin of builtin/broadcast: the ack callback
// of "Increment" adds one to the KV key "counter" and records the
// broadcast in "seen/<id>" (a second application would be visible).
package main

import (
	"strconv"

	"github.com/hostd-dev/hostd/sdk"
)

func init() {
	sdk.OnAck("Increment", func(m sdk.Message) error {
		v, _, err := sdk.KVGet("counter")
		if err != nil {
			return err
		}
		n := 0
		if len(v) > 0 {
			if n, err = strconv.Atoi(string(v)); err != nil {
				return sdk.Permanent(err)
			}
		}
		if err := sdk.KVPut("counter", []byte(strconv.Itoa(n+1))); err != nil {
			return err
		}
		seen, _, err := sdk.KVGet("seen/" + strconv.FormatUint(m.ID, 10))
		if err != nil {
			return err
		}
		c := 0
		if len(seen) > 0 {
			c, _ = strconv.Atoi(string(seen))
		}
		return sdk.KVPut("seen/"+strconv.FormatUint(m.ID, 10), []byte(strconv.Itoa(c+1)))
	})
}

func main() {}

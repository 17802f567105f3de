//go:build wasip1

// Command badptr is a test plugin that passes pointers outside its memory
// to the host calls that return no status (log, set_error, span_event,
// span_attrs, take): each must fail the call (bad_output), never be
// silently ignored. It also scans with an `after` beyond the prefix.
package main

import (
	"strings"

	"github.com/hostd-dev/hostd/sdk"
)

//go:wasmimport hostd log
func hostLog(level int32, ptr, n uint32)

//go:wasmimport hostd set_error
func hostSetError(ptr, n uint32)

//go:wasmimport hostd span_event
func hostSpanEvent(namePtr, nameLen, attrsPtr, attrsLen uint32)

//go:wasmimport hostd span_attrs
func hostSpanAttrs(ptr, n uint32)

//go:wasmimport hostd take
func hostTake(ptr, n uint32) uint32

//go:wasmimport hostd config_get
func hostConfigGet(ptr, n uint32) int64

// bad is far outside any guest memory (and ptr+len wraps past 4 GiB).
const bad = 0xFFFFFF00

func init() {
	sdk.OnAck("BadPtr", func(m sdk.Message) error {
		cmd, arg, _ := strings.Cut(string(m.Payload), " ")
		switch cmd {
		case "log":
			hostLog(0, bad, 512)
		case "set_error":
			hostSetError(bad, 512)
			return sdk.Permanent(errNoMessage{})
		case "span_event":
			hostSpanEvent(bad, 16, 0, 0)
		case "span_event_attrs":
			name := []byte("ev")
			hostSpanEvent(uint32(uintptrOf(name)), uint32(len(name)), bad, 64)
		case "span_attrs":
			hostSpanAttrs(bad, 64)
		case "take":
			key := []byte("no-such-setting")
			if r := hostConfigGet(uint32(uintptrOf(key)), uint32(len(key))); r >= 0 {
				return sdk.Permanent(errNoMessage{})
			}
			hostTake(bad, 64) // the pending error message, into nowhere
		case "ok":
		case "scanpast": // scan prefix arg with after beyond every key with it
			entries, more, err := sdk.KVScan(arg, arg+"\xff\xff", 10)
			if err != nil {
				return err
			}
			if len(entries) != 0 || more {
				return sdk.Permanent(errNoMessage{})
			}
			return sdk.KVPut("scanned", []byte("empty"))
		case "loglevel":
			msg := []byte("loud")
			hostLog(8+992, uint32(uintptrOf(msg)), uint32(len(msg)))
			hostLog(-1000, uint32(uintptrOf(msg)), uint32(len(msg)))
		case "spam":
			for i := 0; i < 500; i++ {
				sdk.Info("spam line")
			}
		}
		return nil
	})
}

type errNoMessage struct{}

func (errNoMessage) Error() string { return "unexpected" }

func main() {}

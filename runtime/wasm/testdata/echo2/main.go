// Command echo2 is a second version of the echo plugin for reload tests:
// it serves Echo with different code.
package main

import (
	"strconv"
	"strings"
	"time"

	"github.com/hostd-dev/hostd/sdk"
)

func init() {
	sdk.OnAck("Echo", func(m sdk.Message) error {
		cmd, arg, _ := strings.Cut(string(m.Payload), " ")
		switch cmd {
		case "version":
			return nil
		case "busy":
			ms, _ := strconv.Atoi(arg)
			end := sdk.Now().Add(time.Duration(ms) * time.Millisecond)
			for sdk.Now().Before(end) {
			}
			return nil
		}
		return sdk.Permanent(strconvErr(cmd))
	})
}

type strconvErr string

func (e strconvErr) Error() string { return "echo2: unknown command " + string(e) }

func main() {}

// Command echo is a well-behaved test plugin that exercises every host
// service: KV (read-modify-write, scan), config, log, spans, time, and
// every handler kind.
package main

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/hostd-dev/hostd/sdk"
	"github.com/hostd-dev/hostd/sdk/abi"
)

func init() {
	sdk.OnAck("Echo", echo)
	sdk.OnValidate("Echo", func(m sdk.Message) error {
		if string(m.Payload) == "reject" {
			return sdk.Permanent(errors.New("rejected by validator"))
		}
		// Validators get read-only KV.
		if string(m.Payload) == "write" {
			return sdk.KVPut("x", []byte("y"))
		}
		return nil
	})
	sdk.ResourceKeys("Echo", func(m sdk.Message) ([]abi.ResourceKey, error) {
		var p struct{ DB, Name string }
		if err := m.Decode(&p); err != nil {
			return nil, sdk.Permanent(err)
		}
		return []abi.ResourceKey{
			{Domain: abi.DomainCollection, Key: p.DB + "." + p.Name, Mode: abi.Exclusive},
			{Domain: abi.DomainDatabase, Key: p.DB, Mode: abi.Shared},
		}, nil
	})
	sdk.OnAck("Counter", counter)
	// Broadcasting AdminOnly needs an admin token (host tests).
	sdk.OnAck("AdminOnly", func(sdk.Message) error { return nil }, sdk.RequireRole(sdk.RoleAdmin))
	sdk.Policy("round-robin", func(in sdk.PolicyInput) (sdk.PolicyOutput, error) {
		var out sdk.PolicyOutput
		if len(in.Brokers) == 0 {
			return out, sdk.Permanent(errors.New("no brokers"))
		}
		for q := uint32(0); q < in.Queues; q++ {
			out.Assignments = append(out.Assignments, abi.Assignment{Queue: q, Broker: in.Brokers[int(q)%len(in.Brokers)].Name})
		}
		return out, nil
	})
}

func main() {}

// counter increments KV key "n" (the hammer and conflict tests use it).
func counter(m sdk.Message) error {
	v, _, err := sdk.KVGet("n")
	if err != nil {
		return err
	}
	n, _ := strconv.Atoi(string(v))
	return sdk.KVPut("n", []byte(strconv.Itoa(n+1)))
}

func echo(m sdk.Message) error {
	cmd, arg, _ := strings.Cut(string(m.Payload), " ")
	switch cmd {
	case "ok":
		return nil
	case "fail":
		return errors.New("asked to fail")
	case "permanent":
		return sdk.Permanent(errors.New("asked to fail for good"))
	case "put": // put k=v k=v ...
		for _, kv := range strings.Fields(arg) {
			k, v, _ := strings.Cut(kv, "=")
			if err := sdk.KVPut(k, []byte(v)); err != nil {
				return err
			}
		}
		return nil
	case "del":
		return sdk.KVDelete(arg)
	case "readown": // put then read back within the same call
		if err := sdk.KVPut(arg, []byte("own")); err != nil {
			return err
		}
		v, ok, err := sdk.KVGet(arg)
		if err != nil || !ok || string(v) != "own" {
			return sdk.Permanent(fmt.Errorf("read own write: %q %v %v", v, ok, err))
		}
		return nil
	case "scan": // scan prefix, then put "scanned" = the keys joined
		entries, more, err := sdk.KVScan(arg, "", 0)
		if err != nil {
			return err
		}
		var keys []string
		for _, e := range entries {
			keys = append(keys, e.Key+"="+string(e.Value))
		}
		return sdk.KVPut("scanned", []byte(strings.Join(keys, ",")+fmt.Sprintf(" more=%v", more)))
	case "config":
		v, ok := sdk.Config(arg)
		return sdk.KVPut("config", []byte(fmt.Sprintf("%s:%v", v, ok)))
	case "env": // message fields as the guest saw them
		b, _ := json.Marshal(map[string]any{"id": m.ID, "type": m.Type, "props": m.Properties,
			"vch": m.VChannels, "attempt": m.Attempt, "tp": m.TraceParent, "now": sdk.Now().UnixNano()})
		return sdk.KVPut("env", b)
	case "log":
		sdk.Info("hello from echo", "arg", arg)
		fmt.Println("stdout line")
		sdk.SpanEvent("echo.event", "arg", arg)
		sdk.SpanAttr("echo.attr", arg)
		return nil
	case "busy": // compute for arg milliseconds, then succeed
		ms, _ := strconv.Atoi(arg)
		end := sdk.Now().Add(time.Duration(ms) * time.Millisecond)
		for sdk.Now().Before(end) {
		}
		return nil
	case "sandbox": // what the guest can reach of the machine
		_, ferr := os.ReadFile("/etc/hostname")
		_, derr := os.ReadDir("/")
		r := make([]byte, 8)
		_, rerr := rand.Read(r)
		b, _ := json.Marshal(map[string]any{"fs": fmt.Sprint(ferr), "dir": fmt.Sprint(derr), "env": os.Environ(),
			"args": len(os.Args), "rand": hex.EncodeToString(r), "randErr": fmt.Sprint(rerr), "wall": time.Now().Year()})
		return sdk.KVPut("sandbox", b)
	case "spam": // more output than the log budget
		for i := 0; i < 10000; i++ {
			fmt.Println("spam spam spam spam spam spam spam spam spam spam", i)
		}
		return nil
	}
	return sdk.Permanent(fmt.Errorf("unknown command %q", cmd))
}

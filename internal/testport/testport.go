// Package testport picks loopback TCP ports for servers a test starts but
// must name before they listen (etcd peer URLs, NATS routes).
//
// Ports come from below Linux's ephemeral range (32768–60999 by default),
// chosen at random and checked free: a port taken from the ephemeral
// range with "listen on :0, close, reuse" can be handed to another
// process's outgoing connection or :0 listener before the server binds it,
// which is how CI once failed with "address already in use". Callers that
// can still lose a race (two test processes picking the same random port)
// retry with fresh ports; IsAddrInUse tells them when.
package testport

import (
	"errors"
	"math/rand/v2"
	"net"
	"strconv"
	"syscall"
	"testing"
)

const (
	low  = 20000
	high = 32000 // exclusive; below the default ephemeral range
)

// Pick returns a free port on 127.0.0.1 outside the ephemeral range. The
// test fails if none is found in 200 tries.
func Pick(t testing.TB) int {
	t.Helper()
	for range 200 {
		p := low + rand.IntN(high-low)
		l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p))
		if err != nil {
			continue
		}
		_ = l.Close()
		return p
	}
	t.Fatalf("testport: no free loopback port in [%d,%d) after 200 tries", low, high)
	return 0
}

// Addr is Pick as "127.0.0.1:port".
func Addr(t testing.TB) string {
	t.Helper()
	return "127.0.0.1:" + strconv.Itoa(Pick(t))
}

// IsAddrInUse reports whether err is a bind failure on a taken port.
func IsAddrInUse(err error) bool {
	return errors.Is(err, syscall.EADDRINUSE)
}

package testport

import (
	"net"
	"strconv"
	"testing"
)

func TestPickIsFreeAndBelowEphemeral(t *testing.T) {
	seen := map[int]bool{}
	for range 20 {
		p := Pick(t)
		if p < low || p >= high {
			t.Fatalf("port %d outside [%d,%d)", p, low, high)
		}
		seen[p] = true
	}
	if len(seen) < 2 {
		t.Fatalf("20 picks gave %d distinct ports: not random", len(seen))
	}
}

func TestIsAddrInUse(t *testing.T) {
	l, err := net.Listen("tcp", Addr(t))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	port := l.Addr().(*net.TCPAddr).Port
	_, err = net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port))
	if !IsAddrInUse(err) {
		t.Fatalf("second listen on %d: IsAddrInUse(%v) = false", port, err)
	}
	if IsAddrInUse(nil) {
		t.Fatal("IsAddrInUse(nil) = true")
	}
}

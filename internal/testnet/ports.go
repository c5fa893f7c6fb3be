// Package testnet gives tests loopback addresses to listen on and loopback
// connections.
package testnet

import (
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
	"testing"
)

// FreePorts returns n distinct loopback addresses ("127.0.0.1:port") that
// were free a moment ago. All n listeners are held until every port is
// chosen, so the addresses never repeat within one call (ports picked one
// at a time, each listener closed before the next, can). The ports are
// taken below the kernel's ephemeral range when there is room: a cluster
// node dials its routes before the other nodes listen, and an outgoing
// connection takes its source port from that range, possibly the port
// chosen for a node that has not bound it yet. Another process may still
// take one before the caller binds it; callers that can should retry on
// EADDRINUSE.
func FreePorts(t testing.TB, n int) []string {
	t.Helper()
	low := ephemeralLow()
	addrs := make([]string, n)
	for i := range addrs {
		l := listenBelow(low)
		if l == nil {
			var err error
			if l, err = net.Listen("tcp", "127.0.0.1:0"); err != nil {
				t.Fatalf("find a free port: %v", err)
			}
		}
		defer l.Close()
		addrs[i] = l.Addr().String()
	}
	return addrs
}

// ephemeralLow is the first port of the kernel's ephemeral range (Linux's
// ip_local_port_range), or 32768, its default, where it cannot be read.
func ephemeralLow() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err == nil {
		if f := strings.Fields(string(b)); len(f) == 2 {
			if v, err := strconv.Atoi(f[0]); err == nil {
				return v
			}
		}
	}
	return 32768
}

// listenBelow listens on a random free loopback port from 10000 to below
// low, or returns nil when it finds none.
func listenBelow(low int) net.Listener {
	if low <= 11000 {
		return nil
	}
	for range 500 {
		port := 10000 + rand.IntN(low-10000)
		if l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port)); err == nil {
			return l
		}
	}
	return nil
}

// TCPPair returns the two ends of a loopback TCP connection, closed when
// the test ends.
func TCPPair(t testing.TB) (client, server *net.TCPConn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	s, err := ln.Accept()
	if err != nil {
		c.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close(); s.Close() })
	return c.(*net.TCPConn), s.(*net.TCPConn)
}

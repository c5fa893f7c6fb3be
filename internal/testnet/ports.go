// Package testnet gives tests loopback addresses to listen on and loopback
// connections.
package testnet

import (
	"net"
	"testing"
)

// FreePorts returns n distinct loopback addresses ("127.0.0.1:port") that
// were free a moment ago. All n listeners are held until every port is
// chosen, so the addresses never repeat within one call (ports picked one
// at a time, each listener closed before the next, can). Another process
// may still take one before the caller binds it; callers that can should
// retry on EADDRINUSE.
func FreePorts(t testing.TB, n int) []string {
	t.Helper()
	addrs := make([]string, n)
	for i := range addrs {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatalf("find a free port: %v", err)
		}
		defer l.Close()
		addrs[i] = l.Addr().String()
	}
	return addrs
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

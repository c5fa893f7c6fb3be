package testnet

import (
	"net"
	"strconv"
	"testing"
)

// TestFreePorts: the addresses are distinct, free, and below the kernel's
// ephemeral range when it leaves room there.
func TestFreePorts(t *testing.T) {
	low := ephemeralLow()
	addrs := FreePorts(t, 8)
	seen := map[string]bool{}
	for _, a := range addrs {
		if seen[a] {
			t.Fatalf("%s handed out twice in %v", a, addrs)
		}
		seen[a] = true
		_, p, err := net.SplitHostPort(a)
		if err != nil {
			t.Fatal(err)
		}
		port, _ := strconv.Atoi(p)
		if low > 11000 && (port < 10000 || port >= low) {
			t.Errorf("%s: port outside 10000-%d, below the ephemeral range", a, low-1)
		}
		l, err := net.Listen("tcp", a)
		if err != nil {
			t.Fatalf("%s is not free: %v", a, err)
		}
		l.Close()
	}
}

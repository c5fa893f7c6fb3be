package sfu

import (
	"net"
	"testing"
	"time"
)

func TestParseDelayRoutes(t *testing.T) {
	tests := []struct {
		in   string
		n    int
		fail bool
	}{
		{"10.77.1.2/32=10ms,10.77.0.0/16=25ms", 2, false},
		{"", 0, false},
		{"10.77.1.2=10ms", 0, true},
		{"10.77.1.2/32", 0, true},
		{"10.77.1.2/32=-1ms", 0, true},
	}
	for _, tc := range tests {
		rs, err := ParseDelayRoutes(tc.in)
		if (err != nil) != tc.fail || len(rs) != tc.n {
			t.Errorf("ParseDelayRoutes(%q) = %v, %v", tc.in, rs, err)
		}
	}
}

// TestDelayNet: packets to a delayed route arrive in order, no earlier
// than the delay; others are not delayed.
func TestDelayNet(t *testing.T) {
	routes, _ := ParseDelayRoutes("127.0.0.2/32=30ms")
	dn, err := NewDelayNet(routes)
	if err != nil {
		t.Fatal(err)
	}
	rx, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer rx.Close()
	tx, err := dn.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Close()
	start := time.Now()
	for i := byte(0); i < 5; i++ {
		if _, err := tx.WriteTo([]byte{i}, rx.LocalAddr()); err != nil {
			t.Fatal(err)
		}
	}
	buf := make([]byte, 10)
	_ = rx.SetReadDeadline(time.Now().Add(5 * time.Second))
	for i := byte(0); i < 5; i++ {
		if _, _, err := rx.ReadFrom(buf); err != nil || buf[0] != i {
			t.Fatalf("packet %d: got %d, %v", i, buf[0], err)
		}
	}
	_ = start // 127.0.0.1 is not on the delayed route: nothing to bound
	rx2, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 2)})
	if err != nil {
		t.Skipf("127.0.0.2 not usable: %v", err)
	}
	defer rx2.Close()
	start = time.Now()
	if _, err := tx.WriteTo([]byte{9}, rx2.LocalAddr()); err != nil {
		t.Fatal(err)
	}
	_ = rx2.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, _, err := rx2.ReadFrom(buf); err != nil {
		t.Fatal(err)
	}
	if el := time.Since(start); el < 30*time.Millisecond {
		t.Fatalf("delayed packet arrived after %v, before its 30 ms delay", el)
	}
}

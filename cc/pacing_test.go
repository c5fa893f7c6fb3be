package cc

import (
	"net"
	"slices"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/xrealm/xrealm/hera"
)

// TestKernelPacingRate loads each congestion control with pacing, moves
// data over a veth pair and reads the socket's pacing rate from TCP_INFO.
// It fails if hera-paper with Pacing set leaves the rate unlimited (its
// --pacing flag would do nothing), or if hera overwrites the rate on every
// ACK whatever the socket's SO_MAX_PACING_RATE, which the kernel's own
// pacing update respects.
func TestKernelPacingRate(t *testing.T) {
	nsA, nsB := vethPair(t, "ccpace", "xrcp", 67)

	paper := hera.PaperParams()
	paper.Pacing = true
	const maxRate = 5_000_000 // bytes/s
	for _, tc := range []struct {
		name    string
		p       hera.Params
		maxRate int // SO_MAX_PACING_RATE, 0: not set
	}{
		{"hera-paper", paper, 0},
		{"hera", hera.DefaultParams(), maxRate},
	} {
		t.Run(tc.name, func(t *testing.T) {
			kname := KernelName(tc.name)
			if avail, _ := Available(); slices.Contains(avail, kname) {
				t.Skipf("skipping: %s is already registered by someone else; not touching it", tc.name)
			}
			if err := Load(tc.name, tc.p); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() {
				if err := Unload(tc.name); err != nil {
					t.Errorf("unload: %v", err)
				}
			})
			l, received := sink(t, nsA, "10.67.0.1:0")
			setCC := SetCongestion(kname)
			d := net.Dialer{Control: func(network, address string, rc syscall.RawConn) error {
				if err := setCC(network, address, rc); err != nil {
					return err
				}
				if tc.maxRate == 0 {
					return nil
				}
				var serr error
				if err := rc.Control(func(fd uintptr) {
					serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_MAX_PACING_RATE, tc.maxRate)
				}); err != nil {
					return err
				}
				return serr
			}}
			const total = 4 << 20
			c, rc := dialAndSend(t, nsB, &d, l.Addr().String(), total)
			info, err := TCPInfo(rc)
			if err != nil {
				t.Fatal(err)
			}
			c.Close()
			if n := <-received; n != total {
				t.Errorf("receiver got %d bytes, want %d", n, total)
			}
			t.Logf("%s: pacing rate %d B/s (max %d), snd_cwnd %d, rtt %d µs", tc.name, info.Pacing_rate, info.Max_pacing_rate, info.Snd_cwnd, info.Rtt)
			if info.Pacing_rate == ^uint64(0) {
				t.Fatalf("%s with Pacing: the socket's pacing rate is unlimited", tc.name)
			}
			if tc.maxRate > 0 && info.Pacing_rate > uint64(tc.maxRate) {
				t.Fatalf("pacing rate %d B/s above the socket's SO_MAX_PACING_RATE %d", info.Pacing_rate, tc.maxRate)
			}
		})
	}
}

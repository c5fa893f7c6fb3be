package cc

import (
	"fmt"
	"net"
	"os/exec"
	"slices"
	"strings"
	"testing"

	"github.com/xrealm/xrealm/hera"
)

// TestKernelCwndClamp checks that hera and hera-paper keep the congestion
// window at or below the socket's snd_cwnd_clamp, as the kernel's own
// congestion controls (and BBR, which like hera sets the window in
// cong_control) do. The clamp comes from a locked cwnd route metric, which
// the kernel copies into the tcp_metrics cache when a connection closes and
// into snd_cwnd_clamp when the next connection to that destination starts;
// a first connection with cubic fills the cache and shows that the clamp is
// in force. It fails if hera sets snd_cwnd to its own window whatever the
// clamp (several hundred segments here).
func TestKernelCwndClamp(t *testing.T) {
	nsA, nsB := vethPair(t, "ccclamp", "xrcl", 68)
	const clamp = 8
	ip(t, "-n", nsB, "route", "add", "10.68.0.1/32", "dev", "xrcl1", "src", "10.68.0.2", "cwnd", "lock", fmt.Sprint(clamp))

	// send moves total bytes from nsB to nsA with congestion control kname
	// and returns the window the kernel reports before the sender closes.
	send := func(t *testing.T, kname string) uint32 {
		t.Helper()
		l, received := sink(t, nsA, "10.68.0.1:0")
		const total = 8 << 20
		c, rc := dialAndSend(t, nsB, &net.Dialer{Control: SetCongestion(kname)}, l.Addr().String(), total)
		info, err := TCPInfo(rc)
		if err != nil {
			t.Fatal(err)
		}
		if got, err := Congestion(rc); err != nil || got != kname {
			t.Fatalf("socket's congestion control is %q (%v), want %q", got, err, kname)
		}
		c.Close()
		if n := <-received; n != total {
			t.Fatalf("receiver got %d bytes, want %d", n, total)
		}
		t.Logf("%s: snd_cwnd %d after %d MiB, clamp %d", kname, info.Snd_cwnd, total>>20, clamp)
		return info.Snd_cwnd
	}
	if got := send(t, "cubic"); got > clamp {
		// The first connection has no cached metrics yet.
		t.Logf("cubic's first connection: snd_cwnd %d, no clamp yet", got)
	}
	if got := send(t, "cubic"); got > clamp {
		out, _ := exec.Command("ip", "-n", nsB, "tcp_metrics", "show").CombinedOutput()
		t.Skipf("skipping: the kernel did not apply the locked cwnd metric (cubic's snd_cwnd %d > %d); tcp_metrics: %s", got, clamp, strings.TrimSpace(string(out)))
	}

	for _, name := range Names {
		t.Run(name, func(t *testing.T) {
			kname := KernelName(name)
			if avail, _ := Available(); slices.Contains(avail, kname) {
				t.Skipf("skipping: %s is already registered by someone else; not touching it", name)
			}
			p, err := hera.ForVariant(name)
			if err != nil {
				t.Fatal(err)
			}
			if err := Load(name, p); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() {
				if err := Unload(name); err != nil {
					t.Errorf("unload: %v", err)
				}
			})
			if got := send(t, kname); got > clamp {
				t.Errorf("%s: snd_cwnd %d above the socket's snd_cwnd_clamp %d", name, got, clamp)
			}
		})
	}
}

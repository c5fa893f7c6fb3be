package cc

import (
	"os"
	"runtime"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/xrealm/xrealm/hera"
)

// TestLoadWithoutPrivilegeSaysRoot loads the real object without the
// privilege to: as root, on a thread that has dropped every capability.
// The error says that root is needed. It fails if the error is what
// cilium/ebpf makes of its failed feature probes, "map hera_sk: map create:
// prealloc maps not supported (requires >= v4.6)" or "map hera_ops:
// struct_ops requires BTF", which misleads on a kernel that has both.
func TestLoadWithoutPrivilegeSaysRoot(t *testing.T) {
	if _, err := os.Stat("/sys/kernel/btf/vmlinux"); err != nil {
		t.Skip("skipping: the kernel has no BTF (/sys/kernel/btf/vmlinux), so no struct_ops")
	}
	res := make(chan error, 1)
	go func() {
		// Never unlocked: the thread, stripped of its capabilities, ends
		// with this goroutine instead of running others.
		runtime.LockOSThread()
		if os.Geteuid() == 0 {
			hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
			var none [2]unix.CapUserData
			if err := unix.Capset(&hdr, &none[0]); err != nil {
				res <- err
				return
			}
		}
		coll, err := loadCollection("hera", hera.DefaultParams())
		if err == nil {
			coll.Close()
		}
		res <- err
	}()
	err := <-res
	if err == nil {
		t.Fatal("loaded a BPF congestion control without any capability")
	}
	if msg := err.Error(); !strings.Contains(msg, "needs root") || !strings.Contains(msg, "load hera") {
		t.Fatalf("error %q does not say that loading hera needs root", msg)
	}
}

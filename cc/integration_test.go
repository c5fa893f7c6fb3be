package cc

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/cilium/ebpf"

	"github.com/xrealm/xrealm/hera"
	"github.com/xrealm/xrealm/netem"
)

func ip(t *testing.T, args ...string) {
	t.Helper()
	if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
		t.Fatalf("ip %s: %v: %s", strings.Join(args, " "), err, out)
	}
}

// vethPair skips t unless it can load a BPF congestion control (root, a
// kernel with BTF, iproute2); otherwise it makes two network namespaces
// joined by a veth pair, 10.0.{octet}.1 in nsA and .2 in nsB, removed when
// t ends. tag and link name them apart from other tests'.
func vethPair(t *testing.T, tag, link string, octet int) (nsA, nsB string) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("skipping: loading a BPF congestion control needs root")
	}
	if _, err := os.Stat("/sys/kernel/btf/vmlinux"); err != nil {
		t.Skip("skipping: the kernel has no BTF (/sys/kernel/btf/vmlinux), so no struct_ops")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		t.Skip("skipping: iproute2's ip command is not installed")
	}
	nsA = fmt.Sprintf("xrealm-%s-%d-a", tag, os.Getpid())
	nsB = fmt.Sprintf("xrealm-%s-%d-b", tag, os.Getpid())
	ip(t, "netns", "add", nsA)
	t.Cleanup(func() { exec.Command("ip", "netns", "del", nsA).Run() })
	ip(t, "netns", "add", nsB)
	t.Cleanup(func() { exec.Command("ip", "netns", "del", nsB).Run() })
	ip(t, "-n", nsA, "link", "add", link+"0", "type", "veth", "peer", "name", link+"1", "netns", nsB)
	ip(t, "-n", nsA, "addr", "add", fmt.Sprintf("10.%d.0.1/24", octet), "dev", link+"0")
	ip(t, "-n", nsB, "addr", "add", fmt.Sprintf("10.%d.0.2/24", octet), "dev", link+"1")
	ip(t, "-n", nsA, "link", "set", link+"0", "up")
	ip(t, "-n", nsB, "link", "set", link+"1", "up")
	return nsA, nsB
}

// sink listens on addr in namespace ns (closed when t ends) and reads one
// connection to its end; received gets the bytes read, -1 if none came.
func sink(t *testing.T, ns, addr string) (net.Listener, <-chan int64) {
	t.Helper()
	var l net.Listener
	if err := netem.InNamespace(ns, func() (err error) { l, err = net.Listen("tcp", addr); return err }); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	received := make(chan int64, 1)
	go func() {
		c, err := l.Accept()
		if err != nil {
			received <- -1
			return
		}
		defer c.Close()
		n, _ := io.Copy(io.Discard, c)
		received <- n
	}()
	return l, received
}

// dialAndSend dials addr from namespace ns with d and writes total bytes;
// it returns the connection and its raw socket, for reading its state.
func dialAndSend(t *testing.T, ns string, d *net.Dialer, addr string, total int) (net.Conn, syscall.RawConn) {
	t.Helper()
	var c net.Conn
	if err := netem.InNamespace(ns, func() (err error) {
		c, err = d.DialContext(context.Background(), "tcp", addr)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 1<<16)
	for sent := 0; sent < total; sent += len(buf) {
		if _, err := c.Write(buf); err != nil {
			t.Fatal(err)
		}
	}
	rc, err := c.(syscall.Conn).SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	return c, rc
}

// TestKernelIntegration loads each congestion control, moves data over a
// veth pair between two namespaces with TCP_CONGESTION set to it, checks the
// kernel reports it for the socket, and unloads it.
func TestKernelIntegration(t *testing.T) {
	nsA, nsB := vethPair(t, "cctest", "xrcc", 66)

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
				if errors.Is(err, ebpf.ErrNotSupported) {
					t.Skipf("skipping: kernel lacks struct_ops support: %v", err)
				}
				t.Fatal(err)
			}
			t.Cleanup(func() {
				if err := Unload(name); err != nil {
					t.Errorf("unload: %v", err)
				}
				if avail, _ := Available(); slices.Contains(avail, kname) {
					t.Errorf("%s still available after unload: %v", kname, avail)
				}
			})
			if avail, _ := Available(); !slices.Contains(avail, kname) {
				t.Fatalf("%s not in tcp_available_congestion_control after load: %v", kname, avail)
			}
			l, received := sink(t, nsA, "10.66.0.1:0")
			const total = 32 << 20
			c, rc := dialAndSend(t, nsB, &net.Dialer{Control: SetCongestion(kname)}, l.Addr().String(), total)
			got, err := Congestion(rc)
			if err != nil {
				t.Fatal(err)
			}
			if got != kname {
				t.Errorf("kernel reports congestion control %q for the socket, want %q", got, kname)
			}
			info, err := TCPInfo(rc)
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("%s: snd_cwnd %d, rtt %d µs after %d MiB", name, info.Snd_cwnd, info.Rtt, total>>20)
			if info.Snd_cwnd == 0 {
				t.Errorf("snd_cwnd is 0")
			}
			c.Close()
			if n := <-received; n != total {
				t.Errorf("receiver got %d bytes, want %d", n, total)
			}
		})
	}
}

// TestVerifierAcceptsObjects loads both embedded objects with their default
// parameters into the kernel without registering them, so the verifier's
// verdict is checked even while a benchmark keeps hera registered.
func TestVerifierAcceptsObjects(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("skipping: loading BPF programs needs root")
	}
	if _, err := os.Stat("/sys/kernel/btf/vmlinux"); err != nil {
		t.Skip("skipping: the kernel has no BTF (/sys/kernel/btf/vmlinux), so no struct_ops")
	}
	for _, name := range Names {
		p, err := hera.ForVariant(name)
		if err != nil {
			t.Fatal(err)
		}
		coll, err := loadCollection(name, p)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		coll.Close()
	}
}

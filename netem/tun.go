package netem

import (
	"fmt"
	"sync"

	"golang.org/x/sys/unix"
)

// tunDev is a non-blocking TUN device file descriptor. The device
// disappears when it is closed.
type tunDev struct {
	fd   int
	once sync.Once
}

func (t *tunDev) Close() error {
	var err error
	t.once.Do(func() { err = unix.Close(t.fd) })
	return err
}

// openTUN creates a TUN device (layer 3, no packet information header) in
// the calling thread's network namespace. Every packet carries a
// virtio-net header (IFF_VNET_HDR), and the device offers checksum and IPv4
// TCP segmentation offload, so the kernel may hand over GSO packets of up to
// 64 KB (see gso.go).
func openTUN(name string) (*tunDev, error) {
	fd, err := unix.Open("/dev/net/tun", unix.O_RDWR|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
	if err != nil {
		return nil, fmt.Errorf("netem: open /dev/net/tun: %w", err)
	}
	ifr, err := unix.NewIfreq(name)
	if err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("netem: TUN name %q: %w", name, err)
	}
	ifr.SetUint16(unix.IFF_TUN | unix.IFF_NO_PI | unix.IFF_VNET_HDR)
	if err := unix.IoctlIfreq(fd, unix.TUNSETIFF, ifr); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("netem: create TUN %s: %w", name, err)
	}
	if err := unix.IoctlSetInt(fd, unix.TUNSETOFFLOAD, unix.TUN_F_CSUM|unix.TUN_F_TSO4|unix.TUN_F_TSO_ECN); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("netem: enable offloads on TUN %s: %w", name, err)
	}
	return &tunDev{fd: fd}, nil
}

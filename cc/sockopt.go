package cc

import (
	"fmt"
	"syscall"

	"golang.org/x/sys/unix"
)

// SetCongestion returns a net.Dialer/ListenConfig Control function that sets
// the socket's congestion control (TCP_CONGESTION) before it connects.
func SetCongestion(name string) func(network, address string, c syscall.RawConn) error {
	return func(network, address string, c syscall.RawConn) error {
		var serr error
		if err := c.Control(func(fd uintptr) {
			serr = unix.SetsockoptString(int(fd), unix.IPPROTO_TCP, unix.TCP_CONGESTION, name)
		}); err != nil {
			return err
		}
		if serr != nil {
			return fmt.Errorf("cc: set TCP_CONGESTION=%s on %s %s: %w", name, network, address, serr)
		}
		return nil
	}
}

// Congestion returns the congestion control the kernel reports for a
// socket.
func Congestion(c syscall.RawConn) (string, error) {
	var name string
	var gerr error
	if err := c.Control(func(fd uintptr) {
		name, gerr = unix.GetsockoptString(int(fd), unix.IPPROTO_TCP, unix.TCP_CONGESTION)
	}); err != nil {
		return "", err
	}
	if gerr != nil {
		return "", fmt.Errorf("cc: get TCP_CONGESTION: %w", gerr)
	}
	return name, nil
}

// TCPInfo returns the kernel's TCP_INFO for a socket.
func TCPInfo(c syscall.RawConn) (*unix.TCPInfo, error) {
	var info *unix.TCPInfo
	var gerr error
	if err := c.Control(func(fd uintptr) {
		info, gerr = unix.GetsockoptTCPInfo(int(fd), unix.IPPROTO_TCP, unix.TCP_INFO)
	}); err != nil {
		return nil, err
	}
	if gerr != nil {
		return nil, fmt.Errorf("cc: get TCP_INFO: %w", gerr)
	}
	return info, nil
}

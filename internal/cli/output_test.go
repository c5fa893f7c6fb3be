package cli

import (
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"golang.org/x/sys/unix"
)

// readerGone counts a pipe or socket whose reader has gone, and nothing
// else: a terminal that hung up (the SSH session of a disowned xrealm
// serve ended) reports POLLHUP too, and taken for a closed pipe it would
// let the first SIGPIPE from a client connection reset stop the server.
func TestReaderGone(t *testing.T) {
	tests := []struct {
		name string
		open func(t *testing.T) int // the fd to look at; closed by the test
		want bool
	}{
		{"pipe whose reader left", func(t *testing.T) int {
			r, w := pipe(t)
			unix.Close(r)
			return w
		}, true},
		{"pipe still read", func(t *testing.T) int {
			r, w := pipe(t)
			t.Cleanup(func() { unix.Close(r) })
			return w
		}, false},
		{"socket whose peer closed", func(t *testing.T) int {
			fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
			if err != nil {
				t.Fatal(err)
			}
			unix.Close(fds[1])
			return fds[0]
		}, true},
		{"socket still open", func(t *testing.T) int {
			fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { unix.Close(fds[1]) })
			return fds[0]
		}, false},
		{"terminal that hung up", func(t *testing.T) int {
			master, slave := openPTY(t)
			unix.Close(master)
			return slave
		}, false},
		{"regular file", func(t *testing.T) int {
			fd, err := unix.Open(filepath.Join(t.TempDir(), "log"), unix.O_WRONLY|unix.O_CREAT|unix.O_CLOEXEC, 0o600)
			if err != nil {
				t.Fatal(err)
			}
			return fd
		}, false},
		{"/dev/null", func(t *testing.T) int {
			fd, err := unix.Open(os.DevNull, unix.O_WRONLY|unix.O_CLOEXEC, 0)
			if err != nil {
				t.Fatal(err)
			}
			return fd
		}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fd := tt.open(t)
			defer unix.Close(fd)
			if got := readerGone(fd); got != tt.want {
				t.Fatalf("readerGone = %v, want %v", got, tt.want)
			}
		})
	}
}

func pipe(t *testing.T) (r, w int) {
	t.Helper()
	var p [2]int
	if err := unix.Pipe2(p[:], unix.O_CLOEXEC); err != nil {
		t.Fatal(err)
	}
	return p[0], p[1]
}

// openPTY opens a pseudo-terminal: closing master hangs up slave, as an
// SSH session's end does its shell's terminal.
func openPTY(t *testing.T) (master, slave int) {
	t.Helper()
	master, err := unix.Open("/dev/ptmx", unix.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Skipf("no pseudo-terminals here: %v", err)
	}
	if err := unix.IoctlSetPointerInt(master, unix.TIOCSPTLCK, 0); err != nil {
		unix.Close(master)
		t.Fatalf("unlocking the pty: %v", err)
	}
	n, err := unix.IoctlGetInt(master, unix.TIOCGPTN)
	if err != nil {
		unix.Close(master)
		t.Fatalf("pty number: %v", err)
	}
	slave, err = unix.Open("/dev/pts/"+strconv.Itoa(n), unix.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if err != nil {
		unix.Close(master)
		t.Skipf("opening /dev/pts/%d: %v", n, err)
	}
	return master, slave
}

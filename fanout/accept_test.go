package fanout

import (
	"net"
	"os"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// emfileListener is a real TCP listener whose first Accept fails as
// accept(2) does when the process has run out of file descriptors (a
// whole test process brought to that limit would fail its other tests).
type emfileListener struct {
	net.Listener
	failed atomic.Bool
}

func (l *emfileListener) Accept() (net.Conn, error) {
	if l.failed.CompareAndSwap(false, true) {
		return nil, &net.OpError{Op: "accept", Net: "tcp", Addr: l.Addr(), Err: os.NewSyscallError("accept4", syscall.EMFILE)}
	}
	return l.Listener.Accept()
}

// Running out of file descriptors is a passing condition: Accept waits and
// accepts again. It returned the error, and the front end whose listener
// it served stopped accepting for good while the node went on running.
func TestAcceptRetriesAfterRunningOutOfFiles(t *testing.T) {
	tl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l := &emfileListener{Listener: tl}
	var closed atomic.Bool
	served := make(chan net.Conn, 1)
	done := make(chan error, 1)
	go func() { done <- Accept(l, closed.Load, func(c net.Conn) { served <- c }) }()
	c, err := net.Dial("tcp", tl.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	select {
	case sc := <-served:
		sc.Close()
	case err := <-done:
		t.Fatalf("Accept returned %v after running out of file descriptors", err)
	case <-time.After(20 * time.Second):
		t.Fatal("the connection was not accepted")
	}
	closed.Store(true)
	tl.Close()
	if err := <-done; err != nil {
		t.Fatalf("Accept of a listener closed on purpose returned %v", err)
	}
}

package fanout

import (
	"errors"
	"net"
	"syscall"
	"time"
)

// Accept accepts connections on l and hands each to serve, until l fails.
// Temporary accept errors (such as running out of file descriptors) are
// retried with a growing pause of up to a second. When l was closed on
// purpose, closed reports true and Accept returns nil; otherwise it returns
// the accept error.
func Accept(l net.Listener, closed func() bool, serve func(net.Conn)) error {
	var delay time.Duration
	for {
		c, err := l.Accept()
		if err != nil {
			if temporary(err) {
				delay = min(max(delay*2, 5*time.Millisecond), time.Second)
				time.Sleep(delay)
				continue
			}
			if closed() {
				return nil
			}
			return err
		}
		delay = 0
		serve(c)
	}
}

// temporary reports whether an accept error passes: a timeout, the
// process or system out of file descriptors or memory for the moment, a
// connection aborted before it was accepted. (Retrying only timeouts
// would make a front end that runs out of file descriptors stop accepting
// for good while the node runs on.)
func temporary(err error) bool {
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return true
	}
	for _, e := range []syscall.Errno{syscall.EMFILE, syscall.ENFILE, syscall.ENOBUFS, syscall.ENOMEM, syscall.ECONNABORTED, syscall.EINTR} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

package fanout

import (
	"errors"
	"net"
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
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
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

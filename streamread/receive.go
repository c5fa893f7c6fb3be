package streamread

import (
	"errors"
	"io"
	"net"
	"os"
	"syscall"
	"time"
)

// Options tune Receive.
type Options struct {
	// Stop, if not nil, is checked before each read; Receive ends with
	// net.ErrClosed once it reports true. (On a plain socket Receive keeps
	// reading while data arrives, without returning to the poller, which
	// would notice that the connection was closed.)
	Stop func() bool
	// Idle, when positive, ends Receive with a timeout (a net.Error whose
	// Timeout is true) when nothing arrived for this long: an MQTT
	// keepalive. Over a wrapper (TLS, WebSocket) it may be noticed up to a
	// second late.
	Idle time.Duration
}

// probeEvery bounds how long a plain socket that gets no data waits for
// the poller before Receive reads it once more. A read that does not fill its buffer is not
// followed by another (see receiveRaw); if the peer's FIN or RST arrived
// before that read, the poller reported it before the read, and will not
// again. The read after a probe finds it.
const probeEvery = time.Second

// Receive reads nc into r until the connection fails or handle returns an
// error, which Receive then returns. After each read it calls handle,
// which takes the complete packets from r (Bytes and Discard); bytes of a
// packet not yet complete stay in r for the next read. Receive owns nc's read deadline.
//
// On a plain socket, handle runs inside RawConn.Read, and closing nc waits
// until it has returned: handle must not close nc itself (close it on
// another goroutine, and have Stop report true).
func Receive(nc net.Conn, r *Buffer, opt Options, handle func() error) error {
	if opt.Stop == nil {
		opt.Stop = func() bool { return false }
	}
	// Raw reads only from a plain TCP socket: a wrapper (TLS, WebSocket)
	// must see every byte through its Read.
	if tc, ok := nc.(*net.TCPConn); ok {
		if rc, err := tc.SyscallConn(); err == nil {
			return receiveRaw(tc, rc, r, opt, handle)
		}
	}
	return receiveWrapped(nc, r, opt, handle)
}

// receiveWrapped reads through nc's Read. A timed-out Read may leave a
// wrapper unusable, so the deadline is not a probe here but the keepalive
// itself, moved at most once a second (or a quarter of Idle).
func receiveWrapped(nc net.Conn, r *Buffer, opt Options, handle func() error) error {
	slack := min(time.Second, opt.Idle/4)
	var set time.Time
	if opt.Idle <= 0 {
		nc.SetReadDeadline(time.Time{})
	}
	for {
		if opt.Stop() {
			return net.ErrClosed
		}
		if opt.Idle > 0 {
			if now := time.Now(); now.Sub(set) >= slack {
				set = now
				nc.SetReadDeadline(now.Add(opt.Idle + slack))
			}
		}
		n, err := nc.Read(r.Space())
		if n > 0 {
			r.Advance(n)
			if herr := handle(); herr != nil {
				return herr
			}
		}
		if err != nil {
			return err
		}
	}
}

// receiveRaw reads a socket with read system calls of its own, inside
// RawConn.Read. A read that does not fill the buffer has emptied the
// socket, so the loop then waits for the poller rather than reading again
// only to get EAGAIN, as a net.Conn's Read does: on a connection that
// sends one small packet at a time that is half of its reads. The
// poller's readiness is reset only when RawConn.Read starts, so data that
// arrives after the short read still ends the wait. A deadline probeEvery
// after the last data restarts RawConn.Read, whose first read finds a FIN
// or an error that came before the short read (see probeEvery), and checks
// Idle.
func receiveRaw(tc *net.TCPConn, rc syscall.RawConn, r *Buffer, opt Options, handle func() error) error {
	var rerr error
	last := time.Now() // of the last read that brought data
	var armed time.Time
	// arm sets the deadline at which a wait ends: probeEvery after now, or
	// sooner if the connection would be idle for Idle by then. It reports
	// false if it is idle for that long already.
	arm := func(now time.Time) bool {
		wait := probeEvery
		if opt.Idle > 0 {
			left := opt.Idle - now.Sub(last)
			if left <= 0 {
				return false
			}
			wait = min(wait, left)
		}
		tc.SetReadDeadline(now.Add(wait))
		armed = now
		return true
	}
	read := func(fd uintptr) bool {
		for {
			if opt.Stop() {
				rerr = net.ErrClosed
				return true
			}
			borrowed := r.borrow()
			sp := r.Space()
			n, err := syscall.Read(int(fd), sp)
			if err == nil && n > 0 {
				r.Advance(n)
				herr := handle()
				r.giveBack(borrowed)
				if herr != nil {
					rerr = herr
					return true
				}
				last = time.Now()
				if last.Sub(armed) >= probeEvery/2 {
					// Data keeps coming: move the deadline away, so that
					// a busy connection is not probed (a read and a
					// wake-up per second) and only a quiet one is.
					arm(last)
				}
				if n < len(sp) {
					return false
				}
				continue
			}
			r.giveBack(borrowed)
			switch {
			case err == syscall.EAGAIN:
				return false
			case err == syscall.EINTR:
				continue
			case err != nil:
				rerr = os.NewSyscallError("read", err)
				return true
			default: // n == 0
				rerr = io.EOF
				return true
			}
		}
	}
	for {
		if !arm(time.Now()) {
			return &net.OpError{Op: "read", Net: "tcp", Source: tc.LocalAddr(), Addr: tc.RemoteAddr(), Err: os.ErrDeadlineExceeded}
		}
		err := rc.Read(read)
		if rerr != nil {
			return rerr
		}
		if !errors.Is(err, os.ErrDeadlineExceeded) {
			return err
		}
	}
}

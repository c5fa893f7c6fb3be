package bots

import (
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"syscall"
	"time"
)

// DefaultMaxPacket is the largest MQTT packet a client accepts unless
// MQTTConfig.MaxPacket says otherwise.
const DefaultMaxPacket = 16 << 20

// packetReader splits an MQTT byte stream into packets. It owns one
// buffer, and may borrow a shared one for a read: a packet's body is valid
// until the next call to space or giveBack.
type packetReader struct {
	buf        []byte
	start, end int    // unread bytes are buf[start:end]
	max        int    // largest remaining length accepted
	own        []byte // the reader's own buffer while buf is borrowed
}

// sharedBufs holds read buffers that the clients' read goroutines borrow
// for one read at a time. sync.Pool keeps a list per P, so a read lands in
// a buffer that was just read on the same CPU and is in its cache; with a
// buffer per connection, hundreds of connections' buffers are not, and
// the kernel's copy into them was the generator's largest cost.
var sharedBufs = sync.Pool{New: func() any { b := make([]byte, sharedBufSize); return &b }}

const sharedBufSize = 64 << 10

// borrow moves the unread bytes into a shared buffer and reads into that
// until giveBack; nil when more than a quarter of one is unread (a large
// packet in progress stays in the reader's own buffer).
func (r *packetReader) borrow() *[]byte {
	if r.end-r.start > sharedBufSize/4 {
		return nil
	}
	p := sharedBufs.Get().(*[]byte)
	r.own = r.buf
	r.end = copy(*p, r.buf[r.start:r.end])
	r.start = 0
	r.buf = *p
	return p
}

// giveBack moves the unread bytes back into the reader's own buffer and
// returns the shared one (p from borrow; nil: nothing borrowed).
func (r *packetReader) giveBack(p *[]byte) {
	if p == nil {
		return
	}
	unread := r.buf[r.start:r.end]
	if len(unread) > len(r.own) {
		r.own = make([]byte, 2*len(unread))
	}
	r.end = copy(r.own, unread)
	r.start = 0
	r.buf, r.own = r.own, nil
	sharedBufs.Put(p)
}

func newPacketReader(size, max int) *packetReader {
	return &packetReader{buf: make([]byte, size), max: max}
}

// next returns the next complete packet in the buffer: its first byte and
// its body. ok is false when the buffer holds no complete packet yet.
func (r *packetReader) next() (first byte, body []byte, ok bool, err error) {
	b := r.buf[r.start:r.end]
	n, mult, i := 0, 1, 1
	for ; ; i++ {
		if i >= len(b) {
			return 0, nil, false, nil
		}
		d := b[i]
		n += int(d&0x7f) * mult
		if d&0x80 == 0 {
			break
		}
		if i == 4 {
			return 0, nil, false, fmt.Errorf("malformed remaining length % x", b[1:5])
		}
		mult *= 128
	}
	if n > r.max {
		return 0, nil, false, fmt.Errorf("packet type %d of %d bytes exceeds the client's limit of %d", b[0]>>4, n, r.max)
	}
	end := i + 1 + n
	if len(b) < end {
		return 0, nil, false, nil
	}
	r.start += end
	return b[0], b[i+1 : end], true, nil
}

// space returns the free end of the buffer for the next read, after moving
// the unread bytes to the front; it grows the buffer when a packet larger
// than it is pending. Bodies returned by next are invalid afterwards.
func (r *packetReader) space() []byte {
	if r.start > 0 {
		r.end = copy(r.buf, r.buf[r.start:r.end])
		r.start = 0
	}
	if r.end == len(r.buf) {
		r.buf = append(r.buf, make([]byte, len(r.buf))...)
	}
	return r.buf[r.end:]
}

// readPacket reads from nc until one packet is complete and returns it. It
// is for the handshake; receive takes over the buffer afterwards.
func (c *MQTTClient) readPacket() (byte, []byte, error) {
	for {
		first, body, ok, err := c.rd.next()
		if err != nil || ok {
			return first, body, err
		}
		n, err := c.nc.Read(c.rd.space())
		c.rd.end += n
		if err != nil {
			return 0, nil, err
		}
	}
}

// receive reads until the connection fails, handing every complete packet
// to handle with the time of the read that completed it.
func (c *MQTTClient) receive() error {
	if err := c.drain(time.Now().UnixNano()); err != nil {
		return err
	}
	// Raw reads only from a plain TCP socket: a wrapper (WebSocket) must
	// see every byte through its Read.
	if tc, ok := c.nc.(*net.TCPConn); ok {
		if rc, err := tc.SyscallConn(); err == nil {
			return c.receiveRaw(rc)
		}
	}
	for {
		n, err := c.nc.Read(c.rd.space())
		if n > 0 {
			c.rd.end += n
			if err := c.drain(time.Now().UnixNano()); err != nil {
				return err
			}
		}
		if err != nil {
			return err
		}
	}
}

// receiveRaw reads a socket with read system calls of its own, inside one
// RawConn.Read: a read that does not fill the buffer has emptied the
// socket, so the loop waits for the poller rather than reading again only
// to get EAGAIN (as a net.Conn's Read does, which doubles the read calls
// of a connection that gets one write at a time). The poller's readiness
// is reset only when RawConn.Read starts, so a write that arrives after
// the short read still wakes the wait.
func (c *MQTTClient) receiveRaw(rc syscall.RawConn) error {
	var rerr error
	err := rc.Read(func(fd uintptr) bool {
		for {
			if c.closing.Load() {
				rerr = net.ErrClosed
				return true
			}
			borrowed := c.rd.borrow()
			sp := c.rd.space()
			n, err := syscall.Read(int(fd), sp)
			if err == nil && n > 0 {
				c.rd.end += n
				err = c.drain(time.Now().UnixNano())
				c.rd.giveBack(borrowed)
				if err != nil {
					rerr = err
					return true
				}
				if n < len(sp) {
					return false
				}
				continue
			}
			c.rd.giveBack(borrowed)
			switch {
			case err == syscall.EAGAIN:
				return false
			case err == syscall.EINTR:
				continue
			case err != nil:
				rerr = err
				return true
			default: // n == 0
				rerr = io.EOF
				return true
			}
		}
	})
	return errors.Join(err, rerr)
}

// drain handles every complete packet in the buffer.
func (c *MQTTClient) drain(at int64) error {
	for {
		first, body, ok, err := c.rd.next()
		if err != nil || !ok {
			if c.cfg.OnReadEnd != nil {
				c.cfg.OnReadEnd()
			}
			return err
		}
		if err := c.handle(first, body, at); err != nil {
			return err
		}
	}
}

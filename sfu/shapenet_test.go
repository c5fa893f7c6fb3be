package sfu

import (
	"net"
	"sync/atomic"
	"time"

	"github.com/pion/transport/v4"
	"github.com/pion/transport/v4/stdnet"
)

// shapeNet is a transport.Net for a client (ClientConfig.Net) whose UDP
// sockets receive through a bottleneck: a FIFO drained at rate bit/s that
// drops what arrives when it already holds maxDelay of packets, as the
// narrow last link of a path would (its queue builds delay, then loses).
// A rate of zero lets every packet through at once. It shapes what the
// client receives, so the node's estimator of that client sees it.
type shapeNet struct {
	transport.Net
	rate     atomic.Int64 // bit/s; 0 is unlimited
	maxDelay time.Duration
	dropped  atomic.Uint64
}

func newShapeNet(maxDelay time.Duration) (*shapeNet, error) {
	std, err := stdnet.NewNet()
	if err != nil {
		return nil, err
	}
	return &shapeNet{Net: std, maxDelay: maxDelay}, nil
}

// setRate sets the bottleneck's rate (bit/s); 0 lifts it.
func (n *shapeNet) setRate(bps int64) { n.rate.Store(bps) }

func (n *shapeNet) ListenUDP(network string, laddr *net.UDPAddr) (transport.UDPConn, error) {
	c, err := n.Net.ListenUDP(network, laddr)
	if err != nil {
		return nil, err
	}
	s := &shapedConn{UDPConn: c, n: n, queue: make(chan shapedPacket, 4096), out: make(chan shapedPacket), done: make(chan struct{})}
	go s.read()
	go s.release()
	return s, nil
}

func (n *shapeNet) ListenPacket(network, address string) (net.PacketConn, error) {
	addr, err := net.ResolveUDPAddr(network, address)
	if err != nil {
		return nil, err
	}
	return n.ListenUDP(network, addr)
}

type shapedPacket struct {
	b    []byte
	addr net.Addr
}

type shapedConn struct {
	transport.UDPConn
	n      *shapeNet
	queue  chan shapedPacket // read, waiting for the bottleneck
	out    chan shapedPacket // through the bottleneck
	queued atomic.Int64      // bytes in queue
	done   chan struct{}
	err    error // why read stopped; set before done is closed
}

func (c *shapedConn) read() {
	for {
		buf := make([]byte, 1500)
		k, addr, err := c.UDPConn.ReadFrom(buf)
		if err != nil {
			c.err = err
			close(c.done)
			return
		}
		if r := c.n.rate.Load(); r > 0 && time.Duration(c.queued.Load()*8*int64(time.Second)/r) > c.n.maxDelay {
			c.n.dropped.Add(1)
			continue
		}
		select {
		case c.queue <- shapedPacket{b: buf[:k], addr: addr}:
			c.queued.Add(int64(k))
		default:
			c.n.dropped.Add(1)
		}
	}
}

// release passes the queue's packets on, each once the bottleneck has
// taken the time to send it at the rate of the moment.
func (c *shapedConn) release() {
	var free time.Time // when the bottleneck is done with what it sent
	for {
		var p shapedPacket
		select {
		case p = <-c.queue:
		case <-c.done:
			return
		}
		if r := c.n.rate.Load(); r > 0 {
			now := time.Now()
			if free.Before(now) {
				free = now
			}
			free = free.Add(time.Duration(int64(len(p.b)) * 8 * int64(time.Second) / r))
			time.Sleep(time.Until(free))
		}
		c.queued.Add(-int64(len(p.b)))
		select {
		case c.out <- p:
		case <-c.done:
			return
		}
	}
}

func (c *shapedConn) ReadFrom(b []byte) (int, net.Addr, error) {
	select {
	case p := <-c.out:
		return copy(b, p.b), p.addr, nil
	case <-c.done:
		return 0, nil, c.err
	}
}

func (c *shapedConn) ReadFromUDP(b []byte) (int, *net.UDPAddr, error) {
	k, addr, err := c.ReadFrom(b)
	ua, _ := addr.(*net.UDPAddr)
	return k, ua, err
}

func (c *shapedConn) Read(b []byte) (int, error) {
	k, _, err := c.ReadFrom(b)
	return k, err
}

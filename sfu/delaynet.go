package sfu

import (
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/pion/transport/v4"
	"github.com/pion/transport/v4/stdnet"
)

// DelayRoute delays the UDP packets sent to a network by a fixed time.
type DelayRoute struct {
	Net   *net.IPNet
	Delay time.Duration
}

// ParseDelayRoutes parses "CIDR=duration,..." (for example
// "10.77.3.2/32=25ms,10.77.0.0/16=10ms"); the first matching route wins.
func ParseDelayRoutes(s string) ([]DelayRoute, error) {
	var out []DelayRoute
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		cidr, dur, ok := strings.Cut(f, "=")
		if !ok {
			return nil, fmt.Errorf("sfu: delay route %q: want CIDR=duration", f)
		}
		_, n, err := net.ParseCIDR(cidr)
		if err != nil {
			return nil, fmt.Errorf("sfu: delay route %q: %w", f, err)
		}
		d, err := time.ParseDuration(dur)
		if err != nil || d < 0 {
			return nil, fmt.Errorf("sfu: delay route %q: bad duration", f)
		}
		out = append(out, DelayRoute{Net: n, Delay: d})
	}
	return out, nil
}

// NewDelayNet returns a transport.Net for pion (SettingEngine.SetNet) whose
// UDP sockets hold every packet for its destination's route delay before
// sending it. It emulates propagation delay where the kernel has no netem
// qdisc: the bench shapes capacity with HTB in the kernel and adds the
// path's delay here, at the sender.
func NewDelayNet(routes []DelayRoute) (transport.Net, error) {
	std, err := stdnet.NewNet()
	if err != nil {
		return nil, fmt.Errorf("sfu: delay net: %w", err)
	}
	return &delayNet{Net: std, routes: routes}, nil
}

type delayNet struct {
	transport.Net
	routes []DelayRoute
}

func (n *delayNet) ListenUDP(network string, laddr *net.UDPAddr) (transport.UDPConn, error) {
	c, err := n.Net.ListenUDP(network, laddr)
	if err != nil {
		return nil, err
	}
	return &delayConn{UDPConn: c, routes: n.routes, lines: map[time.Duration]chan delayed{}}, nil
}

func (n *delayNet) ListenPacket(network, address string) (net.PacketConn, error) {
	addr, err := net.ResolveUDPAddr(network, address)
	if err != nil {
		return nil, err
	}
	return n.ListenUDP(network, addr)
}

type delayed struct {
	due  time.Time
	b    []byte
	addr net.Addr
}

// delayConn sends through one FIFO line per delay value, so that packets
// to one destination keep their order.
type delayConn struct {
	transport.UDPConn
	routes  []DelayRoute
	mu      sync.Mutex
	closed  bool
	lines   map[time.Duration]chan delayed
	dropped atomic.Uint64
}

func (c *delayConn) delay(addr net.Addr) time.Duration {
	ua, ok := addr.(*net.UDPAddr)
	if !ok {
		return 0
	}
	for _, r := range c.routes {
		if r.Net.Contains(ua.IP) {
			return r.Delay
		}
	}
	return 0
}

func (c *delayConn) WriteTo(b []byte, addr net.Addr) (int, error) {
	d := c.delay(addr)
	if d == 0 {
		return c.UDPConn.WriteTo(b, addr)
	}
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return 0, net.ErrClosed
	}
	line := c.lines[d]
	if line == nil {
		line = make(chan delayed, 8192)
		c.lines[d] = line
		go c.run(line)
	}
	select {
	case line <- delayed{due: time.Now().Add(d), b: append([]byte(nil), b...), addr: addr}:
	default:
		c.dropped.Add(1) // the line is full: lose the packet, as a link would
	}
	c.mu.Unlock()
	return len(b), nil
}

func (c *delayConn) WriteToUDP(b []byte, addr *net.UDPAddr) (int, error) { return c.WriteTo(b, addr) }

func (c *delayConn) run(line chan delayed) {
	for p := range line {
		if w := time.Until(p.due); w > 0 {
			time.Sleep(w)
		}
		_, _ = c.UDPConn.WriteTo(p.b, p.addr)
	}
}

func (c *delayConn) Close() error {
	c.mu.Lock()
	if !c.closed {
		c.closed = true
		for _, l := range c.lines {
			close(l)
		}
	}
	c.mu.Unlock()
	return c.UDPConn.Close()
}

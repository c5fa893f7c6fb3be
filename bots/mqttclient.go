package bots

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/eclipse/paho.mqtt.golang/packets"
	"github.com/gorilla/websocket"
	"github.com/xrealm/xrealm/mqttwire"
	"github.com/xrealm/xrealm/wsstream"
)

// MQTTConfig configures one MQTT 3.1.1 client connection.
type MQTTConfig struct {
	// Addr is host:port (or mqtt://host:port) for MQTT over TCP, or a
	// ws:// or wss:// URL (for example ws://127.0.0.1:8080/mqtt) for MQTT
	// over WebSocket.
	Addr     string
	ClientID string
	Username string // empty: no user name
	Password string // empty: no password (the xrealm token otherwise)
	// Keepalive is sent in CONNECT; a PINGREQ goes out when nothing else
	// was written, or nothing read, for half of it, and the connection
	// ends when nothing came from the server for one and a half. 0 means
	// 60 s.
	Keepalive time.Duration
	// OnPublish receives every PUBLISH, on the connection's read
	// goroutine, with the time (Unix nanoseconds) of the read that
	// completed it. topic and payload are valid only during the call.
	OnPublish func(topic, payload []byte, recvNanos int64)
	// OnReadEnd, if set, is called on the read goroutine after the
	// packets of one read were handled.
	OnReadEnd func()
	// ReadBuffer is the initial size of the read buffer; 0 means 64 KiB.
	ReadBuffer int
	// MaxPacket is the largest packet (remaining length) accepted; a
	// larger one ends the connection. 0 means DefaultMaxPacket.
	MaxPacket int
}

// MQTTClient is a lean MQTT 3.1.1 client: clean session, QoS 0 publishes,
// one read goroutine, writes made by the caller under a mutex.
type MQTTClient struct {
	cfg     MQTTConfig
	nc      net.Conn
	rd      *mqttwire.Reader // used by the read goroutine only
	done    chan struct{}
	closing atomic.Bool

	wmu       sync.Mutex
	wbuf      []byte
	lastWrite atomic.Int64
	lastRead  atomic.Int64 // Unix ns of the last read that brought bytes
	// handling is set while the reader hands a read's packets to the
	// callbacks: the keepalive counts that time as the server heard from
	// (a slow OnPublish is not a silent server).
	handling atomic.Bool
	nextID   atomic.Uint32

	pmu     sync.Mutex
	pending map[uint16]chan []byte // SUBACK return codes by packet id

	errMu sync.Mutex
	err   error
}

// handshakeTimeout bounds CONNECT to CONNACK when the context has no
// deadline.
const handshakeTimeout = 15 * time.Second

// DialMQTT connects, sends CONNECT and waits for the CONNACK.
func DialMQTT(ctx context.Context, cfg MQTTConfig) (*MQTTClient, error) {
	if cfg.Keepalive == 0 {
		cfg.Keepalive = 60 * time.Second
	}
	if cfg.ReadBuffer == 0 {
		cfg.ReadBuffer = 64 << 10
	}
	if cfg.MaxPacket == 0 {
		cfg.MaxPacket = DefaultMaxPacket
	}
	nc, err := dialStream(ctx, cfg.Addr)
	if err != nil {
		return nil, err
	}
	c := &MQTTClient{cfg: cfg, nc: nc, rd: mqttwire.NewReader(cfg.ReadBuffer, mqttwire.MaxLength(cfg.MaxPacket)), done: make(chan struct{}), pending: map[uint16]chan []byte{}}
	wait := handshakeTimeout
	if dl, ok := ctx.Deadline(); ok {
		wait = min(wait, time.Until(dl))
	}
	nc.SetDeadline(time.Now().Add(wait))
	// The end of ctx (Ctrl-C) ends the handshake at once, not after wait.
	stop := context.AfterFunc(ctx, func() { nc.SetDeadline(time.Now()) })
	defer stop()
	fail := func(err error) (*MQTTClient, error) {
		nc.Close()
		if ctx.Err() != nil {
			return nil, fmt.Errorf("mqtt %s: %w", cfg.Addr, context.Cause(ctx))
		}
		return nil, err
	}
	cp := packets.NewControlPacket(packets.Connect).(*packets.ConnectPacket)
	cp.ProtocolName, cp.ProtocolVersion = "MQTT", 4
	cp.CleanSession = true
	cp.ClientIdentifier = cfg.ClientID
	cp.Keepalive = uint16(cfg.Keepalive / time.Second)
	if cfg.Username != "" {
		cp.UsernameFlag, cp.Username = true, cfg.Username
	}
	if cfg.Password != "" {
		cp.PasswordFlag, cp.Password = true, []byte(cfg.Password)
	}
	if err := c.writePacket(cp); err != nil {
		return fail(fmt.Errorf("mqtt %s: send CONNECT: %w", cfg.Addr, err))
	}
	typ, body, err := c.readPacket()
	// An HTTP server answers CONNECT with "HTTP/1.1 400 ...", whose first
	// bytes read as a packet of type 4 and a length.
	if err == nil && typ == 'H' && bytes.HasPrefix(body, []byte("TP/")) || err != nil && bytes.HasPrefix(c.rd.Bytes(), []byte("HTTP/")) {
		return fail(fmt.Errorf("mqtt %s: an HTTP server answered CONNECT: bots speak MQTT over TCP to an MQTT port (xrealm serve --mqtt-addr), or over WebSocket to a ws://host:port/mqtt URL", cfg.Addr))
	}
	if err != nil {
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, syscall.ECONNRESET) {
			return fail(fmt.Errorf("mqtt %s: the server closed the connection instead of answering CONNECT (bots speak MQTT over plain TCP or WebSocket: is this a TLS port, or not an MQTT server?): %w", cfg.Addr, err))
		}
		if errors.Is(err, os.ErrDeadlineExceeded) {
			return fail(fmt.Errorf("mqtt %s: no CONNACK within %s of CONNECT (is this an MQTT server?): %w", cfg.Addr, wait.Round(time.Millisecond), err))
		}
		return fail(fmt.Errorf("mqtt %s: waiting for CONNACK: %w", cfg.Addr, err))
	}
	if typ>>4 != packets.Connack || len(body) < 2 {
		return fail(fmt.Errorf("mqtt %s: expected CONNACK, got packet type %d (is this an MQTT server?)", cfg.Addr, typ>>4))
	}
	if rc := body[1]; rc != packets.Accepted {
		return fail(fmt.Errorf("mqtt %s: connection refused: %s", cfg.Addr, packets.ConnackReturnCodes[rc]))
	}
	if !stop() {
		return fail(ctx.Err())
	}
	nc.SetDeadline(time.Time{})
	c.lastRead.Store(time.Now().UnixNano())
	go c.readLoop()
	go c.keepalive()
	return c, nil
}

func dialStream(ctx context.Context, addr string) (net.Conn, error) {
	if strings.HasPrefix(addr, "ws://") || strings.HasPrefix(addr, "wss://") {
		d := websocket.Dialer{Subprotocols: []string{"mqtt"}, ReadBufferSize: 64 << 10, WriteBufferSize: 16 << 10, HandshakeTimeout: 15 * time.Second}
		ws, _, err := d.DialContext(ctx, addr, nil)
		if err != nil {
			return nil, fmt.Errorf("mqtt over websocket %s: %w", addr, err)
		}
		return wsstream.New(ws), nil
	}
	hostPort := addr
	if scheme, rest, ok := strings.Cut(addr, "://"); ok {
		switch scheme {
		case "mqtt", "tcp":
			hostPort = strings.TrimSuffix(rest, "/")
		case "http", "https":
			return nil, fmt.Errorf("mqtt %s: bots speak MQTT, over TCP (host:port of an MQTT port, xrealm serve --mqtt-addr) or WebSocket (ws://host:port/mqtt), not HTTP", addr)
		default:
			return nil, fmt.Errorf("mqtt %s: scheme %q: want host:port or mqtt://host:port (MQTT over TCP), or ws:// or wss:// (MQTT over WebSocket); bots do not speak MQTT over TLS", addr, scheme)
		}
	}
	var d net.Dialer
	nc, err := d.DialContext(ctx, "tcp", hostPort)
	if err != nil {
		return nil, fmt.Errorf("mqtt %s: %w", addr, err)
	}
	return nc, nil
}

// Done is closed when the connection has ended.
func (c *MQTTClient) Done() <-chan struct{} { return c.done }

// Err returns why the connection ended, once Done is closed.
func (c *MQTTClient) Err() error {
	c.errMu.Lock()
	defer c.errMu.Unlock()
	return c.err
}

func (c *MQTTClient) fail(err error) {
	c.errMu.Lock()
	if c.err == nil {
		c.err = err
	}
	c.errMu.Unlock()
	c.closing.Store(true)
	// On its own goroutine: closing a plain socket waits until its reader
	// has left the read callback (streamread.Receive), which may be the
	// caller (a Publish from OnPublish that failed).
	go c.nc.Close()
}

// Subscribe subscribes to filters at QoS 0 and waits for the SUBACK. It
// fails if the server refused any filter.
func (c *MQTTClient) Subscribe(ctx context.Context, filters ...string) error {
	sp := packets.NewControlPacket(packets.Subscribe).(*packets.SubscribePacket)
	sp.MessageID = c.packetID()
	sp.Topics = filters
	sp.Qoss = make([]byte, len(filters))
	ch := make(chan []byte, 1)
	c.pmu.Lock()
	c.pending[sp.MessageID] = ch
	c.pmu.Unlock()
	defer func() {
		c.pmu.Lock()
		delete(c.pending, sp.MessageID)
		c.pmu.Unlock()
	}()
	if err := c.writePacket(sp); err != nil {
		return fmt.Errorf("mqtt subscribe %v: %w", filters, err)
	}
	select {
	case codes := <-ch:
		for i, rc := range codes {
			if rc == 0x80 && i < len(filters) {
				return fmt.Errorf("mqtt subscribe: server refused filter %q", filters[i])
			}
		}
		return nil
	case <-c.done:
		return fmt.Errorf("mqtt subscribe %v: connection ended: %v", filters, c.Err())
	case <-ctx.Done():
		return fmt.Errorf("mqtt subscribe %v: %w", filters, ctx.Err())
	}
}

func (c *MQTTClient) packetID() uint16 {
	for {
		if id := uint16(c.nextID.Add(1)); id != 0 {
			return id
		}
	}
}

// Publish sends a QoS 0 PUBLISH. It is safe for concurrent use; the
// packet is written with one write call.
func (c *MQTTClient) Publish(topic string, payload []byte) error {
	c.wmu.Lock()
	b := mqttwire.AppendPublishHeader(c.wbuf[:0], topic, 0, 0, len(payload))
	b = append(b, payload...)
	c.wbuf = b
	_, err := c.nc.Write(b)
	c.wmu.Unlock()
	c.lastWrite.Store(time.Now().UnixNano())
	if err != nil {
		if peerClosed(err) && !c.closing.Load() {
			err = fmt.Errorf("the server closed the connection (%w)", err)
		}
		err = fmt.Errorf("mqtt publish %s: %w", topic, err)
		c.fail(err)
	}
	return err
}

// peerClosed reports whether err is the other end closing the connection:
// an end of stream, or, with data still unread on one side, a reset or a
// broken pipe.
func peerClosed(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)
}

func (c *MQTTClient) writePacket(cp packets.ControlPacket) error {
	var buf bytes.Buffer
	if err := cp.Write(&buf); err != nil {
		return err
	}
	c.wmu.Lock()
	_, err := c.nc.Write(buf.Bytes())
	c.wmu.Unlock()
	c.lastWrite.Store(time.Now().UnixNano())
	return err
}

// closeWait bounds how long Close waits for a write in progress before it
// closes the connection under it, and how long it gives DISCONNECT.
const closeWait = time.Second

// Close sends DISCONNECT and closes the connection. A write that does not
// finish within closeWait (the server stopped reading, and its socket
// buffers are full) gets no DISCONNECT after it: the connection is closed
// under it, which ends the write with an error.
func (c *MQTTClient) Close() error {
	select {
	case <-c.done:
		return nil
	default:
	}
	if c.lockWrites(closeWait) {
		// Under the write lock: a WebSocket connection's deadline must
		// not change while another goroutine writes a frame.
		c.nc.SetWriteDeadline(time.Now().Add(closeWait))
		var buf bytes.Buffer
		if packets.NewControlPacket(packets.Disconnect).Write(&buf) == nil {
			c.nc.Write(buf.Bytes())
		}
		c.wmu.Unlock()
	}
	c.fail(errors.New("closed by the client"))
	<-c.done
	return nil
}

// lockWrites takes the write lock, unless a write holds it for longer than
// d: then it reports false, and takes and releases it once that write
// ends.
func (c *MQTTClient) lockWrites(d time.Duration) bool {
	got, gaveUp := make(chan struct{}), make(chan struct{})
	go func() {
		c.wmu.Lock()
		select {
		case got <- struct{}{}: // the caller holds it now
		case <-gaveUp:
			c.wmu.Unlock()
		}
	}()
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-got:
		return true
	case <-t.C:
		close(gaveUp)
		return false
	}
}

// pingreq is a PINGREQ packet.
var pingreq = []byte{packets.Pingreq << 4, 0}

// keepalive sends a PINGREQ when the client has written nothing, or read
// nothing, for half the keepalive, and ends the connection when nothing
// at all (PINGRESP included) came from the server for one and a half: the
// server is gone without a word (its host stopped, the link dropped), and
// TCP would take a quarter of an hour to say so, or never, with the
// server's socket still open. A PINGREQ that would wait behind a write in
// progress is left for the next tick.
func (c *MQTTClient) keepalive() {
	half := c.cfg.Keepalive / 2
	t := time.NewTicker(half)
	defer t.Stop()
	for {
		select {
		case <-c.done:
			return
		case <-t.C:
			now := time.Now()
			if c.handling.Load() {
				c.lastRead.Store(now.UnixNano())
			}
			silent := now.Sub(time.Unix(0, c.lastRead.Load()))
			if silent >= c.cfg.Keepalive+half {
				c.fail(fmt.Errorf("mqtt %s: nothing from the server for %s, keepalive %s: it stopped answering", c.cfg.Addr, silent.Round(time.Millisecond), c.cfg.Keepalive))
				return
			}
			if now.Sub(time.Unix(0, c.lastWrite.Load())) < half && silent < half {
				continue
			}
			if !c.wmu.TryLock() {
				continue
			}
			_, err := c.nc.Write(pingreq)
			c.wmu.Unlock()
			c.lastWrite.Store(time.Now().UnixNano())
			if err != nil {
				c.fail(err)
				return
			}
		}
	}
}

func (c *MQTTClient) readLoop() {
	defer close(c.done)
	if err := c.receive(); err != nil {
		if peerClosed(err) && !c.closing.Load() {
			err = fmt.Errorf("the server closed the connection (%w)", err)
		}
		c.fail(fmt.Errorf("mqtt %s: read: %w", c.cfg.Addr, err))
	}
}

func (c *MQTTClient) handle(first byte, body []byte, at int64) error {
	switch first >> 4 {
	case packets.Publish:
		if len(body) < 2 {
			return errors.New("short PUBLISH")
		}
		tl := int(body[0])<<8 | int(body[1])
		if 2+tl > len(body) {
			return errors.New("PUBLISH topic overruns the packet")
		}
		topic := body[2 : 2+tl]
		rest := body[2+tl:]
		qos := (first >> 1) & 3
		var id uint16
		if qos > 0 {
			if len(rest) < 2 {
				return errors.New("PUBLISH without packet id")
			}
			id = uint16(rest[0])<<8 | uint16(rest[1])
			rest = rest[2:]
		}
		if c.cfg.OnPublish != nil {
			c.cfg.OnPublish(topic, rest, at)
		}
		if qos == 1 {
			ack := packets.NewControlPacket(packets.Puback).(*packets.PubackPacket)
			ack.MessageID = id
			return c.writePacket(ack)
		}
		if qos == 2 {
			rec := packets.NewControlPacket(packets.Pubrec).(*packets.PubrecPacket)
			rec.MessageID = id
			return c.writePacket(rec)
		}
	case packets.Suback, packets.Pubrel:
		cp, err := packets.NewControlPacketWithHeader(packets.FixedHeader{MessageType: first >> 4, Qos: (first >> 1) & 3, RemainingLength: len(body)})
		if err != nil {
			return err
		}
		if err := cp.Unpack(bytes.NewReader(body)); err != nil {
			return fmt.Errorf("decode %s: %w", packets.PacketNames[first>>4], err)
		}
		switch p := cp.(type) {
		case *packets.SubackPacket:
			c.pmu.Lock()
			ch := c.pending[p.MessageID]
			c.pmu.Unlock()
			if ch != nil {
				// The first SUBACK answers; a server that sends more
				// must not block the read goroutine on a full channel.
				select {
				case ch <- p.ReturnCodes:
				default:
				}
			}
		case *packets.PubrelPacket:
			comp := packets.NewControlPacket(packets.Pubcomp).(*packets.PubcompPacket)
			comp.MessageID = p.MessageID
			return c.writePacket(comp)
		}
	}
	// PINGRESP, PUBACK, UNSUBACK...: nothing to do.
	return nil
}

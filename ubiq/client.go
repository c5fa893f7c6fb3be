package ubiq

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gorilla/websocket"
	"github.com/xrealm/xrealm/streamread"
)

// Client is a minimal Ubiq peer connection, for tests, bots and tools: it
// sends frames and hands every received frame to a callback on its read
// goroutine. It is not a RoomClient: callers speak the room protocol
// themselves with Request.
type Client struct {
	nc      net.Conn
	ws      *websocket.Conn
	onFrame func(frame []byte, readNanos int64)
	wmu     sync.Mutex
	buf     []byte
	done    chan struct{}
	err     error
	closing atomic.Bool // Close was called: the reader stops
}

// ClientOptions configure Dial.
type ClientOptions struct {
	// OnFrame receives every whole frame (header included); the slice is
	// valid only during the call.
	OnFrame func(frame []byte)
	// OnFrameAt, if set, is called instead of OnFrame with the time (Unix
	// nanoseconds) of the read that completed the frame: the clock is read
	// once per read, not once per frame.
	OnFrameAt func(frame []byte, readNanos int64)
	TLS       *tls.Config // for wss:// addresses
	// MaxFrame bounds received payloads; 0 = DefaultMaxFrame.
	MaxFrame int
}

// Dial connects to addr: host:port for TCP, or a ws:// or wss:// URL.
func Dial(ctx context.Context, addr string, o ClientOptions) (*Client, error) {
	if o.MaxFrame <= 0 {
		o.MaxFrame = DefaultMaxFrame
	}
	c := &Client{onFrame: o.OnFrameAt, done: make(chan struct{})}
	if c.onFrame == nil {
		f := o.OnFrame
		if f == nil {
			f = func([]byte) {}
		}
		c.onFrame = func(b []byte, _ int64) { f(b) }
	}
	if strings.HasPrefix(addr, "ws://") || strings.HasPrefix(addr, "wss://") {
		d := websocket.Dialer{TLSClientConfig: o.TLS}
		ws, _, err := d.DialContext(ctx, addr, nil)
		if err != nil {
			return nil, fmt.Errorf("ubiq dial %s: %w", addr, err)
		}
		ws.SetReadLimit(int64(o.MaxFrame) + HeaderSize)
		c.ws = ws
		go c.readWS(o.MaxFrame)
		return c, nil
	}
	var d net.Dialer
	nc, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("ubiq dial %s: %w", addr, err)
	}
	c.nc = nc
	go c.readTCP(o.MaxFrame)
	return c, nil
}

// readTCP reads the socket with streamread.Receive, which hands over
// whatever one read system call brought (a burst of frames costs one read)
// and waits for the poller after a read that emptied the socket, instead
// of reading again only to get EAGAIN. Every whole frame goes to onFrame
// with the time of the read that completed it.
func (c *Client) readTCP(maxPayload int) {
	defer close(c.done)
	r := frameReader{max: maxPayload}
	r.Init(4 << 10)
	err := streamread.Receive(c.nc, &r.Buffer, streamread.Options{Stop: c.closing.Load}, func() error {
		now := time.Now().UnixNano()
		for {
			f, ok, err := r.next()
			if err != nil || !ok {
				return err
			}
			c.onFrame(f, now)
		}
	})
	c.fail(err)
}

func (c *Client) fail(err error) {
	c.err = err
	c.closing.Store(true)
	c.nc.Close()
}

func (c *Client) readWS(max int) {
	defer close(c.done)
	for {
		_, msg, err := c.ws.ReadMessage()
		if err == nil {
			err = ParseFrame(msg, max)
		}
		if err != nil {
			c.err = err
			c.ws.Close()
			return
		}
		c.onFrame(msg, time.Now().UnixNano())
	}
}

// Send sends payload to the object id.
func (c *Client) Send(id NetworkId, payload []byte) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	c.buf = AppendFrame(c.buf[:0], id, payload)
	return c.writeLocked(c.buf)
}

// SendFrames sends b, whole frames made with AppendFrame, in one write on
// TCP (one system call for several frames, as a batching client would);
// on WebSocket each frame is still its own message.
func (c *Client) SendFrames(b []byte) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if c.ws == nil {
		return c.writeLocked(b)
	}
	_, err := SplitFrames(b, c.writeLocked)
	return err
}

// WriteRaw writes bytes as they are (tests of malformed input).
func (c *Client) WriteRaw(b []byte) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	return c.writeLocked(b)
}

func (c *Client) writeLocked(b []byte) error {
	if c.ws != nil {
		return c.ws.WriteMessage(websocket.BinaryMessage, b)
	}
	_, err := c.nc.Write(b)
	return err
}

// Request sends a room server message of type typ with args.
func (c *Client) Request(typ string, args any) error {
	return c.Send(ServerID, EncodeRequest(typ, args))
}

// Close disconnects. On TCP the socket closes on a goroutine of its own:
// closing a plain socket waits until its reader has left the read callback
// (streamread.Receive), which may be the caller (OnFrame).
func (c *Client) Close() error {
	if c.ws != nil {
		return c.ws.Close()
	}
	c.closing.Store(true)
	go c.nc.Close()
	return nil
}

// Done is closed when the connection has ended; Err then says why.
func (c *Client) Done() <-chan struct{} { return c.done }

// Err returns the read error that ended the connection.
func (c *Client) Err() error {
	select {
	case <-c.done:
		return c.err
	default:
		return nil
	}
}

// DecodeServer decodes a server message's type and unmarshals its args
// into v (if not nil).
func DecodeServer(payload []byte, v any) (string, error) {
	var r Request
	if err := json.Unmarshal(payload, &r); err != nil {
		return "", err
	}
	if v != nil {
		if err := json.Unmarshal([]byte(r.Args), v); err != nil {
			return r.Type, fmt.Errorf("%s args: %w", r.Type, err)
		}
	}
	return r.Type, nil
}

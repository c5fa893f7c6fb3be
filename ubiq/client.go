package ubiq

import (
	"context"
	"crypto/tls"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"net"
	"strings"
	"sync"
	"time"

	"github.com/gorilla/websocket"
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

// readTCP reads as much as the socket has in one system call and hands
// out every whole frame in it, so that a burst of frames costs one read.
func (c *Client) readTCP(maxPayload int) {
	defer close(c.done)
	const chunk = 64 << 10
	buf := make([]byte, chunk)
	start, end := 0, 0 // unread bytes are buf[start:end]
	for {
		if start == end {
			start, end = 0, 0
			if len(buf) > 16*chunk {
				buf = make([]byte, chunk) // do not keep a large frame's buffer
			}
		}
		// Room for the rest of a partial frame, or at least 4 KiB.
		need := 4096
		if end-start >= 4 {
			need = max(need, 4+int(binary.LittleEndian.Uint32(buf[start:]))-(end-start))
		}
		if len(buf)-end < need {
			nb := buf
			if len(buf)-(end-start) < need {
				nb = make([]byte, end-start+need+chunk)
			}
			copy(nb, buf[start:end])
			buf, start, end = nb, 0, end-start
		}
		n, err := c.nc.Read(buf[end:])
		if n == 0 && err != nil {
			c.fail(err)
			return
		}
		end += n
		now := time.Now().UnixNano()
		for end-start >= 4 {
			l := int32(binary.LittleEndian.Uint32(buf[start:]))
			if err := checkLength(l, maxPayload); err != nil {
				c.fail(err)
				return
			}
			if end-start < 4+int(l) {
				break
			}
			c.onFrame(buf[start:start+4+int(l)], now)
			start += 4 + int(l)
		}
	}
}

func (c *Client) fail(err error) {
	c.err = err
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

// Close disconnects.
func (c *Client) Close() error {
	if c.ws != nil {
		return c.ws.Close()
	}
	return c.nc.Close()
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

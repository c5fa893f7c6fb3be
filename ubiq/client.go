package ubiq

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"

	"github.com/gorilla/websocket"
)

// Client is a minimal Ubiq peer connection, for tests, bots and tools: it
// sends frames and hands every received frame to a callback on its read
// goroutine. It is not a RoomClient: callers speak the room protocol
// themselves with Request.
type Client struct {
	nc      net.Conn
	ws      *websocket.Conn
	onFrame func(frame []byte)
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
	TLS     *tls.Config // for wss:// addresses
	// MaxFrame bounds received payloads; 0 = DefaultMaxFrame.
	MaxFrame int
}

// Dial connects to addr: host:port for TCP, or a ws:// or wss:// URL.
func Dial(ctx context.Context, addr string, o ClientOptions) (*Client, error) {
	if o.MaxFrame <= 0 {
		o.MaxFrame = DefaultMaxFrame
	}
	if o.OnFrame == nil {
		o.OnFrame = func([]byte) {}
	}
	c := &Client{onFrame: o.OnFrame, done: make(chan struct{})}
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

func (c *Client) readTCP(max int) {
	defer close(c.done)
	r := bufio.NewReaderSize(c.nc, 64<<10)
	var buf []byte // reused: OnFrame's slice is valid only during the call
	for {
		if cap(buf) < 4 {
			buf = make([]byte, 0, 4096)
		}
		hdr := buf[:4]
		if _, err := io.ReadFull(r, hdr); err != nil {
			c.fail(err)
			return
		}
		n := int32(binary.LittleEndian.Uint32(hdr))
		if err := checkLength(n, max); err != nil {
			c.fail(err)
			return
		}
		if cap(buf) < 4+int(n) {
			nb := make([]byte, 4+int(n))
			copy(nb, hdr)
			buf = nb
		}
		f := buf[:4+int(n)]
		if _, err := io.ReadFull(r, f[4:]); err != nil {
			c.fail(err)
			return
		}
		c.onFrame(f)
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
		c.onFrame(msg)
	}
}

// Send sends payload to the object id.
func (c *Client) Send(id NetworkId, payload []byte) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	c.buf = AppendFrame(c.buf[:0], id, payload)
	return c.writeLocked(c.buf)
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

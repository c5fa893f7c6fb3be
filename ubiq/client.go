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
	// lastRead is when a read last brought bytes (Unix nanoseconds).
	lastRead atomic.Int64
	// silent, once set, is why the watchdog ended the connection: the
	// reader's error then.
	silent  atomic.Pointer[error]
	pinging atomic.Bool // a Ping of the watchdog's is being written
	// inFrame is set while the reader is in the caller's OnFrame: the
	// reader then reads nothing, and the watchdog counts that time as
	// the server's being alive, not silent.
	inFrame atomic.Bool
}

// DefaultServerTimeout is ClientOptions.ServerTimeout's default.
const DefaultServerTimeout = 15 * time.Second

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
	// ServerTimeout ends the connection (Err says so) when nothing at all
	// came from the server for that long, and the client sends a Ping
	// when it has read nothing for a third of it: a server gone without a
	// word (its host stopped, a link that drops everything) is otherwise
	// noticed when TCP gives up, a quarter of an hour, or never while its
	// socket stays open. Its Ping names no client id (the server keeps
	// the one set before), and its answer, a Ping to the client, goes to
	// OnFrame as any message does. Time spent in OnFrame, during which
	// nothing is read, counts as the server's being alive: the timeout
	// runs from the later of the last read and the callback's return (to
	// within a sixth of it). 0 = DefaultServerTimeout; < 0: none.
	ServerTimeout time.Duration
}

// Dial connects to addr: host:port for TCP, or a ws:// or wss:// URL.
func Dial(ctx context.Context, addr string, o ClientOptions) (*Client, error) {
	if o.MaxFrame <= 0 {
		o.MaxFrame = DefaultMaxFrame
	}
	if o.ServerTimeout == 0 {
		o.ServerTimeout = DefaultServerTimeout
	}
	c := &Client{onFrame: o.OnFrameAt, done: make(chan struct{})}
	c.lastRead.Store(time.Now().UnixNano())
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
		c.watch(addr, o.ServerTimeout)
		return c, nil
	}
	var d net.Dialer
	nc, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("ubiq dial %s: %w", addr, err)
	}
	c.nc = nc
	go c.readTCP(o.MaxFrame)
	c.watch(addr, o.ServerTimeout)
	return c, nil
}

// watch runs the watchdog of ServerTimeout, if any, until the connection
// ends: it ends the connection when nothing came from the server for
// timeout, and pings the server when nothing did for a third of it. A
// Ping that would wait behind a write in progress is left for a later
// tick, and one is written on a goroutine of its own: a write to a server
// that stopped reading blocks, and the watchdog must not.
func (c *Client) watch(addr string, timeout time.Duration) {
	if timeout < 0 {
		return
	}
	// The watchdog's Ping names no client id: the server then keeps the
	// connection's as it was (a Ping's sets it).
	ping := AppendFrame(nil, ServerID, EncodeRequest("Ping", struct{}{}))
	go func() {
		t := time.NewTicker(max(timeout/6, time.Millisecond))
		defer t.Stop()
		for {
			select {
			case <-c.done:
				return
			case now := <-t.C:
				if c.inFrame.Load() {
					// The caller's OnFrame holds the reader: what the
					// server sent meanwhile is not read yet.
					c.lastRead.Store(now.UnixNano())
					continue
				}
				silent := now.Sub(time.Unix(0, c.lastRead.Load()))
				if silent >= timeout {
					err := fmt.Errorf("ubiq %s: nothing from the server for %s (timeout %s): it stopped answering", addr, silent.Round(time.Millisecond), timeout)
					c.silent.Store(&err)
					c.closing.Store(true)
					if c.ws != nil {
						c.ws.Close()
					} else {
						c.nc.Close()
					}
					return
				}
				if silent >= timeout/3 && !c.pinging.Swap(true) {
					go func() {
						defer c.pinging.Store(false)
						if c.wmu.TryLock() {
							c.writeLocked(ping)
							c.wmu.Unlock()
						}
					}()
				}
			}
		}
	}()
}

// readError is what ended the reader: the watchdog's reason, if it ended
// the connection, else err.
func (c *Client) readError(err error) error {
	if p := c.silent.Load(); p != nil {
		return *p
	}
	return err
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
		c.lastRead.Store(now)
		c.inFrame.Store(true)
		defer c.inFrame.Store(false)
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
	c.err = c.readError(err)
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
			c.err = c.readError(err)
			c.ws.Close()
			return
		}
		now := time.Now().UnixNano()
		c.lastRead.Store(now)
		c.inFrame.Store(true)
		c.onFrame(msg, now)
		c.inFrame.Store(false)
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

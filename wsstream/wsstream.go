// Package wsstream presents a WebSocket as a byte stream (a net.Conn), for
// protocols such as MQTT whose packets may span WebSocket messages and whose
// messages may hold several packets. Each Write sends one binary message;
// Read runs across message boundaries and skips text messages.
package wsstream

import (
	"io"
	"net"
	"sync"
	"time"

	"github.com/gorilla/websocket"
)

// Conn is a WebSocket read and written as a byte stream.
type Conn struct {
	ws  *websocket.Conn
	r   io.Reader
	wmu sync.Mutex
}

// New wraps ws.
func New(ws *websocket.Conn) *Conn { return &Conn{ws: ws} }

// Read reads from the current binary message and moves on to the next.
// A close by the peer with status 1000 (normal), 1001 (going away: a tab
// closed) or none is the end of the stream, io.EOF; other closes and
// failures are returned as they are.
func (c *Conn) Read(p []byte) (int, error) {
	for {
		if c.r == nil {
			typ, r, err := c.ws.NextReader()
			if websocket.IsCloseError(err, websocket.CloseNormalClosure, websocket.CloseGoingAway, websocket.CloseNoStatusReceived) {
				return 0, io.EOF
			}
			if err != nil {
				return 0, err
			}
			if typ != websocket.BinaryMessage {
				continue
			}
			c.r = r
		}
		n, err := c.r.Read(p)
		if err == io.EOF {
			c.r = nil
			if n > 0 {
				return n, nil
			}
			continue
		}
		return n, err
	}
}

// Write sends p as one binary message.
func (c *Conn) Write(p []byte) (int, error) {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if err := c.ws.WriteMessage(websocket.BinaryMessage, p); err != nil {
		return 0, err
	}
	return len(p), nil
}

// closeWait bounds the close frame's write: a peer that does not read
// does not hold up the close.
const closeWait = 100 * time.Millisecond

// Close sends a close frame, 1000 (normal closure), and closes the
// connection: the peer sees the stream end, as a TCP client sees an end of
// stream, not an abnormal closure (1006). A peer that already went gets
// nothing.
func (c *Conn) Close() error {
	_ = c.ws.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.CloseNormalClosure, ""), time.Now().Add(closeWait))
	return c.ws.Close()
}

func (c *Conn) LocalAddr() net.Addr                { return c.ws.LocalAddr() }
func (c *Conn) RemoteAddr() net.Addr               { return c.ws.RemoteAddr() }
func (c *Conn) SetReadDeadline(t time.Time) error  { return c.ws.SetReadDeadline(t) }
func (c *Conn) SetWriteDeadline(t time.Time) error { return c.ws.SetWriteDeadline(t) }
func (c *Conn) SetDeadline(t time.Time) error {
	c.ws.SetReadDeadline(t)
	return c.ws.SetWriteDeadline(t)
}

package ubiq

import (
	"bufio"
	"errors"
	"io"
	"net"
	"net/http"
	"time"

	"github.com/gorilla/websocket"
)

// WebSocketHandler serves Ubiq over WebSocket on any path: every binary
// message is one whole frame, length field included, both ways.
func (s *Server) WebSocketHandler() http.Handler {
	up := websocket.Upgrader{
		CheckOrigin:     func(*http.Request) bool { return true }, // Ubiq has no cookies to protect
		ReadBufferSize:  32 << 10,
		WriteBufferSize: 32 << 10,
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !websocket.IsWebSocketUpgrade(r) {
			w.WriteHeader(http.StatusOK)
			io.WriteString(w, "This is xrealm's Ubiq WebSocket endpoint. Connect with a Ubiq client.\n")
			return
		}
		// The connection is read through a meteredConn, so that every byte
		// the peer sends counts against its inbound budget: frame headers,
		// control and text messages, and empty fragments, which gorilla
		// reads without returning to the caller.
		hw := &hijackMeter{ResponseWriter: w}
		ws, err := up.Upgrade(hw, r, nil)
		if err != nil {
			s.log.Info("Ubiq WebSocket upgrade failed", "remote", r.RemoteAddr, "err", err)
			return
		}
		if hw.meter == nil { // not hijacked through the meter: cannot be budgeted
			s.log.Info("Ubiq WebSocket upgrade failed", "remote", r.RemoteAddr, "err", "the connection could not be metered")
			ws.Close()
			return
		}
		// No read limit: wsConn.run reads a message's length field first
		// and refuses a frame over MaxFrame before reading its payload;
		// other messages are read and dropped, within the budget.
		transport := "ws"
		if r.TLS != nil {
			transport = "wss"
		}
		c := &wsConn{ws: ws, max: s.cfg.MaxFrame, meter: hw.meter}
		s.serve(c, c, transport)
	})
}

// hijackMeter hands gorilla's Upgrade the hijacked connection wrapped in
// a meteredConn.
type hijackMeter struct {
	http.ResponseWriter
	meter *meteredConn
}

func (h *hijackMeter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	hj, ok := h.ResponseWriter.(http.Hijacker)
	if !ok {
		return nil, nil, errors.New("the response cannot be hijacked")
	}
	nc, brw, err := hj.Hijack()
	if err != nil || brw.Reader.Buffered() > 0 {
		return nc, brw, err // gorilla refuses a client that sent data before the handshake completed
	}
	h.meter = &meteredConn{Conn: nc}
	return h.meter, bufio.NewReadWriter(bufio.NewReader(h.meter), brw.Writer), nil
}

// meteredConn charges every byte read to the connection's inbound budget
// before gorilla sees it. Read is called by the connection's read loop
// only (wsConn.run), which sets charge before it reads.
type meteredConn struct {
	net.Conn
	charge func(frames, bytes int) bool
}

func (m *meteredConn) Read(p []byte) (int, error) {
	n, err := m.Conn.Read(p)
	if n > 0 && m.charge != nil && !m.charge(0, n) {
		return 0, net.ErrClosed
	}
	return n, err
}

// wsConn is a WebSocket carrying one frame per binary message. As a
// net.Conn for the connection's writer, Write splits a batch of frames
// into one message each.
type wsConn struct {
	ws    *websocket.Conn
	max   int
	meter *meteredConn
}

// pongWait bounds the write of a pong, as gorilla's own ping handler does.
const pongWait = time.Second

func (c *wsConn) run(stop func() bool, charge func(frames, bytes int) bool, handle func(f []byte) error) error {
	// Bytes are charged as they come off the wire, and every message as a
	// frame: binary, text (ignored, but read) and control messages alike.
	c.meter.charge = charge
	c.ws.SetPingHandler(func(data string) error {
		if !charge(1, 0) {
			return net.ErrClosed
		}
		err := c.ws.WriteControl(websocket.PongMessage, []byte(data), time.Now().Add(pongWait))
		var ne net.Error
		if err == websocket.ErrCloseSent || errors.As(err, &ne) && ne.Timeout() {
			return nil
		}
		return err
	})
	c.ws.SetPongHandler(func(string) error {
		if !charge(1, 0) {
			return net.ErrClosed
		}
		return nil
	})
	for !stop() {
		typ, r, err := c.ws.NextReader()
		if err != nil {
			return err
		}
		if !charge(1, 0) {
			return net.ErrClosed
		}
		if typ != websocket.BinaryMessage {
			// Read to its end here, so that its bytes are charged before
			// the next message is taken up.
			if _, err := io.Copy(io.Discard, r); err != nil {
				return err
			}
			continue
		}
		f, err := readMessageFrame(r, c.max)
		if err != nil {
			return err
		}
		if err := handle(f); err != nil {
			return err
		}
	}
	return net.ErrClosed
}

// Write is called by the connection's writer goroutine only.
func (c *wsConn) Write(p []byte) (int, error) {
	n, err := SplitFrames(p, func(f []byte) error { return c.ws.WriteMessage(websocket.BinaryMessage, f) })
	if err != nil {
		return n, err
	}
	return len(p), nil
}

func (c *wsConn) Read([]byte) (int, error)           { return 0, io.EOF }
func (c *wsConn) Close() error                       { return c.ws.Close() }
func (c *wsConn) LocalAddr() net.Addr                { return c.ws.LocalAddr() }
func (c *wsConn) RemoteAddr() net.Addr               { return c.ws.RemoteAddr() }
func (c *wsConn) SetReadDeadline(t time.Time) error  { return c.ws.SetReadDeadline(t) }
func (c *wsConn) SetWriteDeadline(t time.Time) error { return c.ws.SetWriteDeadline(t) }
func (c *wsConn) SetDeadline(t time.Time) error {
	c.ws.SetReadDeadline(t)
	return c.ws.SetWriteDeadline(t)
}

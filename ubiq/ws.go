package ubiq

import (
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
		ws, err := up.Upgrade(w, r, nil)
		if err != nil {
			s.log.Info("Ubiq WebSocket upgrade failed", "remote", r.RemoteAddr, "err", err)
			return
		}
		// No read limit: wsConn.run reads a message's length field first
		// and refuses a frame over MaxFrame before reading its payload.
		transport := "ws"
		if r.TLS != nil {
			transport = "wss"
		}
		c := &wsConn{ws: ws, max: s.cfg.MaxFrame}
		s.serve(c, c, transport)
	})
}

// wsConn is a WebSocket carrying one frame per binary message. As a
// net.Conn for the connection's writer, Write splits a batch of frames
// into one message each.
type wsConn struct {
	ws  *websocket.Conn
	max int
}

func (c *wsConn) run(stop func() bool, handle func(f []byte) error) error {
	for !stop() {
		typ, r, err := c.ws.NextReader()
		if err != nil {
			return err
		}
		if typ != websocket.BinaryMessage {
			continue // the next NextReader skips the rest of it
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

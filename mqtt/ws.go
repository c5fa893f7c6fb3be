package mqtt

import (
	"io"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/gorilla/websocket"
)

// WebSocketHandler serves MQTT over WebSocket (subprotocol "mqtt") on any
// path. Browsers connect here.
func (s *Server) WebSocketHandler(transport string) http.Handler {
	up := websocket.Upgrader{
		Subprotocols:    []string{"mqtt", "mqttv3.1"},
		CheckOrigin:     func(*http.Request) bool { return true }, // tokens, not cookies, authenticate
		ReadBufferSize:  16 << 10,
		WriteBufferSize: 16 << 10,
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ws, err := up.Upgrade(w, r, nil)
		if err != nil {
			s.log.Info("MQTT WebSocket upgrade failed", "remote", r.RemoteAddr, "err", err)
			return
		}
		ws.SetReadLimit(int64(s.cfg.MaxPayload) + 128<<10)
		s.ServeConn(&wsConn{ws: ws}, transport)
	})
}

// wsConn presents a WebSocket as a byte stream: MQTT packets may span
// WebSocket messages and a message may hold several packets. Each Write is
// one binary message.
type wsConn struct {
	ws  *websocket.Conn
	r   io.Reader
	wmu sync.Mutex
}

func (c *wsConn) Read(p []byte) (int, error) {
	for {
		if c.r == nil {
			typ, r, err := c.ws.NextReader()
			if err != nil {
				return 0, err
			}
			if typ != websocket.BinaryMessage {
				continue // MQTT over WebSocket is binary; ignore text frames
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

func (c *wsConn) Write(p []byte) (int, error) {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if err := c.ws.WriteMessage(websocket.BinaryMessage, p); err != nil {
		return 0, err
	}
	return len(p), nil
}

func (c *wsConn) Close() error                       { return c.ws.Close() }
func (c *wsConn) LocalAddr() net.Addr                { return c.ws.LocalAddr() }
func (c *wsConn) RemoteAddr() net.Addr               { return c.ws.RemoteAddr() }
func (c *wsConn) SetReadDeadline(t time.Time) error  { return c.ws.SetReadDeadline(t) }
func (c *wsConn) SetWriteDeadline(t time.Time) error { return c.ws.SetWriteDeadline(t) }
func (c *wsConn) SetDeadline(t time.Time) error {
	c.ws.SetReadDeadline(t)
	return c.ws.SetWriteDeadline(t)
}

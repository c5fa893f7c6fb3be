package mqtt

import (
	"net/http"

	"github.com/gorilla/websocket"
	"github.com/xrealm/xrealm/wsstream"
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
		// No WebSocket message limit: messages are read as a stream, and
		// the MQTT reader bounds what it keeps and skips an oversized
		// PUBLISH as it does over TCP, so the sender stays connected.
		s.ServeConn(wsstream.New(ws), transport)
	})
}

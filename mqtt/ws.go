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
		ws.SetReadLimit(int64(s.cfg.MaxPayload) + 128<<10)
		s.ServeConn(wsstream.New(ws), transport)
	})
}

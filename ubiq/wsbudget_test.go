package ubiq

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"
)

// wsFrame is a raw client WebSocket frame (masked, with a zero mask key,
// so the payload goes as is) of opcode op, final or not.
func wsFrame(op byte, fin bool, payload []byte) []byte {
	b0 := op
	if fin {
		b0 |= 0x80
	}
	var b []byte
	switch n := len(payload); {
	case n < 126:
		b = []byte{b0, 0x80 | byte(n)}
	default:
		b = []byte{b0, 0x80 | 126, byte(n >> 8), byte(n)}
	}
	b = append(b, 0, 0, 0, 0) // mask key
	return append(b, payload...)
}

// WebSocket messages that carry no Ubiq frame count against the inbound
// budget too: text messages (ignored), pings (answered with pongs) and
// the bytes of a binary message split into many empty fragments. Each
// case sends far more than the budget's burst, then a Ping to the server,
// whose answer shows that everything before it was read; the server must
// have waited for its budget on the way. (If text and control messages
// were read and dropped, or answered, without taking any of the budget,
// and only a frame's own bytes were charged, a peer could make the server
// do unbounded work.)
func TestWebSocketBudgetCountsEverything(t *testing.T) {
	ping := func(clientID NetworkId) []byte {
		return NewFrame(ServerID, EncodeRequest("Ping", ClientArgs{ClientID: clientID}))
	}
	cases := []struct {
		name   string
		budget Budget
		send   func(ws *websocket.Conn, clientID NetworkId) error
	}{
		{"text messages", Budget{FramesPerSecond: 200, FrameBurst: 10, BytesPerSecond: -1}, func(ws *websocket.Conn, clientID NetworkId) error {
			for range 60 {
				if err := ws.WriteMessage(websocket.TextMessage, []byte(strings.Repeat("x", 100))); err != nil {
					return err
				}
			}
			if err := ws.WriteMessage(websocket.BinaryMessage, ping(clientID)); err != nil {
				return err
			}
			return nil
		}},
		{"one big text message", Budget{FramesPerSecond: -1, BytesPerSecond: 200 << 10, ByteBurst: 1}, func(ws *websocket.Conn, clientID NetworkId) error {
			if err := ws.WriteMessage(websocket.TextMessage, []byte(strings.Repeat("x", 100<<10))); err != nil {
				return err
			}
			if err := ws.WriteMessage(websocket.BinaryMessage, ping(clientID)); err != nil {
				return err
			}
			return nil
		}},
		{"pings", Budget{FramesPerSecond: 200, FrameBurst: 10, BytesPerSecond: -1}, func(ws *websocket.Conn, clientID NetworkId) error {
			for range 60 {
				if err := ws.WriteControl(websocket.PingMessage, []byte("ping"), time.Now().Add(5*time.Second)); err != nil {
					return err
				}
			}
			if err := ws.WriteMessage(websocket.BinaryMessage, ping(clientID)); err != nil {
				return err
			}
			return nil
		}},
		{"empty fragments", Budget{FramesPerSecond: -1, BytesPerSecond: 200 << 10, ByteBurst: 1}, func(ws *websocket.Conn, clientID NetworkId) error {
			// One binary message: the Ping frame, then 20,000 empty
			// continuation fragments (6 bytes each on the wire).
			var b []byte
			b = append(b, wsFrame(websocket.BinaryMessage, false, ping(clientID))...)
			for range 20000 {
				b = append(b, wsFrame(0, false, nil)...)
			}
			b = append(b, wsFrame(0, true, nil)...)
			if _, err := ws.NetConn().Write(b); err != nil {
				return err
			}
			return nil
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ts := startServer(t, nil, func(c *Config) {
				c.MaxFrame = 1024 // so that the byte burst stays small
				c.Inbound = tc.budget
			})
			ws, _, err := websocket.DefaultDialer.Dial(ts.ws, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer ws.Close()
			clientID := NetworkId{A: 77, B: 9}
			sent := make(chan error, 1)
			go func() { sent <- tc.send(ws, clientID) }()
			ws.SetReadDeadline(time.Now().Add(20 * time.Second))
			for {
				typ, m, err := ws.ReadMessage()
				if err != nil {
					t.Fatalf("no answer to the Ping: %v", err)
				}
				if typ != websocket.BinaryMessage || len(m) < HeaderSize || IDOf(m) != clientID {
					continue
				}
				var r Request
				if json.Unmarshal(m[HeaderSize:], &r) == nil && r.Type == "Ping" {
					break
				}
			}
			if err := <-sent; err != nil {
				t.Fatalf("send: %v", err)
			}
			if m := collect(t, ts.s); !strings.Contains(m, "xrealm_ubiq_throttled_frames_total ") || strings.Contains(m, "xrealm_ubiq_throttled_frames_total 0\n") {
				t.Fatalf("the server never waited for the budget (%v)", ts.s.cfg.Inbound)
			}
		})
	}
}

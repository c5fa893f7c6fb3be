package wsstream

import (
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/gorilla/websocket"
)

// TestReadAtClose: the stream reads across binary messages, skips text
// ones, and ends with io.EOF when the peer closes normally or goes away
// (a browser tab that closes), but not for other close codes.
func TestReadAtClose(t *testing.T) {
	for _, tc := range []struct {
		name string
		code int
		eof  bool
	}{
		{"normal", websocket.CloseNormalClosure, true},
		{"going away", websocket.CloseGoingAway, true},
		{"protocol error", websocket.CloseProtocolError, false},
		{"internal error", websocket.CloseInternalServerErr, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := make(chan error, 1)
			var data strings.Builder
			up := websocket.Upgrader{}
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				ws, err := up.Upgrade(w, r, nil)
				if err != nil {
					got <- err
					return
				}
				c := New(ws)
				defer c.Close()
				buf := make([]byte, 3)
				for {
					n, err := c.Read(buf)
					data.Write(buf[:n])
					if err != nil {
						got <- err
						return
					}
				}
			}))
			defer srv.Close()
			ws, _, err := websocket.DefaultDialer.Dial("ws"+strings.TrimPrefix(srv.URL, "http"), nil)
			if err != nil {
				t.Fatal(err)
			}
			defer ws.Close()
			_ = ws.WriteMessage(websocket.BinaryMessage, []byte("hello "))
			_ = ws.WriteMessage(websocket.TextMessage, []byte("skipped"))
			_ = ws.WriteMessage(websocket.BinaryMessage, []byte("world"))
			_ = ws.WriteMessage(websocket.CloseMessage, websocket.FormatCloseMessage(tc.code, "bye"))
			err = <-got
			if data.String() != "hello world" {
				t.Errorf("read %q, want %q", data.String(), "hello world")
			}
			if errors.Is(err, io.EOF) != tc.eof {
				t.Errorf("Read ended with %v; want io.EOF: %v", err, tc.eof)
			}
		})
	}
}

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

// Closing the stream sends a normal close frame: the peer sees the end of
// the stream (1000), not an abnormal closure (1006).
func TestCloseSendsCloseFrame(t *testing.T) {
	up := websocket.Upgrader{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ws, err := up.Upgrade(w, r, nil)
		if err != nil {
			return
		}
		c := New(ws)
		c.Write([]byte("bye"))
		c.Close()
	}))
	defer srv.Close()
	ws, _, err := websocket.DefaultDialer.Dial("ws"+strings.TrimPrefix(srv.URL, "http"), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ws.Close()
	if _, msg, err := ws.ReadMessage(); err != nil || string(msg) != "bye" {
		t.Fatalf("first message %q, %v", msg, err)
	}
	_, _, err = ws.ReadMessage()
	if !websocket.IsCloseError(err, websocket.CloseNormalClosure) {
		t.Fatalf("after the server's Close: %v, want a normal closure (1000)", err)
	}
}

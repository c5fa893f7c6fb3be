package sfu

import (
	"context"
	"encoding/json"
	"errors"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"
)

// probe is a signal that a node's WebSocket handler answers with an error
// before any offer: it shows the socket still serves after a message.
const probe = `{"op":"stats","session":"probe","client":"p"}`

// signalSocket dials a WebSocket signalling server at url (http://...);
// reads fail after a deadline instead of hanging.
func signalSocket(tb testing.TB, url string) *websocket.Conn {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ws, _, err := websocket.DefaultDialer.DialContext(ctx, "ws"+strings.TrimPrefix(url, "http"), nil)
	if err != nil {
		tb.Fatal(err)
	}
	_ = ws.SetReadDeadline(time.Now().Add(20 * time.Second))
	return ws
}

// TestSignalWebSocketBadMessages: a message that is not a Signal is
// answered with an error that says so and quotes it, and the socket goes
// on to the next message; one larger than maxSignal closes the socket with
// status 1009. It fails if a bad message closes the socket without a
// word, or if a message of any size is read whole.
func TestSignalWebSocketBadMessages(t *testing.T) {
	n := fuzzNode(t)
	srv := httptest.NewServer(n.Handler())
	t.Cleanup(srv.Close)
	for _, tc := range []struct {
		name, msg, want string
	}{
		{"not JSON", "hello", `bad signal: invalid character 'h' looking for beginning of value; message "hello"`},
		{"truncated", `{"op":"ping","session":"s"`, "bad signal: unexpected end of JSON input"},
		{"empty", "", `bad signal: unexpected end of JSON input; message ""`},
		{"an array", `[]`, "bad signal: json: cannot unmarshal array"},
		{"op of the wrong type", `{"op":1}`, "bad signal: json: cannot unmarshal number"},
		{"trailing bytes", `{"op":"ping"} {}`, "bad signal: invalid character '{' after top-level value"},
		{"long message", `{"sdp":` + strings.Repeat("x", 1000), "message of 1007 bytes starting"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ws := signalSocket(t, srv.URL)
			defer ws.Close()
			for _, m := range []string{tc.msg, probe} {
				if err := ws.WriteMessage(websocket.TextMessage, []byte(m)); err != nil {
					t.Fatal(err)
				}
			}
			var rep Reply
			if err := ws.ReadJSON(&rep); err != nil {
				t.Fatalf("no reply to %q: %v", tc.msg, err)
			}
			if rep.Op != "error" || !strings.Contains(rep.Error, tc.want) {
				t.Fatalf("reply to %q: %+v; want an error containing %q", tc.msg, rep, tc.want)
			}
			if len(rep.Error) > 500 {
				t.Errorf("error of %d bytes quotes too much", len(rep.Error))
			}
			if err := ws.ReadJSON(&rep); err != nil || rep.Op != "error" || !strings.Contains(rep.Error, "before an offer") {
				t.Fatalf("the socket did not go on after %q: %+v, %v", tc.msg, rep, err)
			}
		})
	}
	t.Run("too large", func(t *testing.T) {
		ws := signalSocket(t, srv.URL)
		defer ws.Close()
		big := `{"op":"ping","session":"s","client":"c","sdp":"` + strings.Repeat("x", maxSignal) + `"}`
		_ = ws.WriteMessage(websocket.TextMessage, []byte(big)) // may fail once the server closes
		_, _, err := ws.ReadMessage()
		var ce *websocket.CloseError
		if !errors.As(err, &ce) || ce.Code != websocket.CloseMessageTooBig {
			t.Fatalf("after a message of %d bytes: %v; want close status %d", len(big), err, websocket.CloseMessageTooBig)
		}
	})
}

// FuzzSignalWebSocket sends one message, anything a browser could send, to
// a node's WebSocket signalling handler, then a probe signal. Before an
// offer every message is answered with an error saying why (one that is
// not a Signal: "bad signal", quoting it), and the socket goes on: the
// probe is answered too. Offers (which place a client: FuzzSignal) and
// leaves (which end a socket with nothing placed) are left out.
func FuzzSignalWebSocket(f *testing.F) {
	for _, s := range []string{
		`{"op":"ping","session":"s","client":"c"}`,
		`{"op":"pose","session":"s","client":"c","pose":{"position":[1,2,3]}}`,
		`{"op":"stats","session":"s.x","client":"c"}`,
		`{"op":"explode","session":"s","client":""}`,
		`{"op":"offer","session":"s","client":"c","sdp":"v=0"}`,
		`{"op":"ping","session":"s","client":"c","token":"x"}`,
		`{"op":1}`, `{"op":"ping"`, `{"op":"ping"} {}`, `[]`, `null`, ``, "\xff\xfe", `not json`,
	} {
		f.Add([]byte(s), false)
		f.Add([]byte(s), true)
	}
	n := fuzzNode(f)
	srv := httptest.NewServer(n.Handler())
	f.Cleanup(srv.Close)
	f.Fuzz(func(t *testing.T, msg []byte, binary bool) {
		var s Signal
		decodes := json.Unmarshal(msg, &s) == nil
		if decodes && (s.Op == "offer" || s.Op == "leave") {
			return
		}
		ws := signalSocket(t, srv.URL)
		defer ws.Close()
		typ := websocket.TextMessage
		if binary {
			typ = websocket.BinaryMessage
		}
		if err := ws.WriteMessage(typ, msg); err != nil {
			t.Fatal(err)
		}
		if err := ws.WriteMessage(websocket.TextMessage, []byte(probe)); err != nil {
			t.Fatal(err)
		}
		var rep Reply
		if err := ws.ReadJSON(&rep); err != nil {
			t.Fatalf("no reply to %q: %v", msg, err)
		}
		if rep.Op != "error" || rep.Error == "" {
			t.Fatalf("reply to %q before an offer: %+v; want an error", msg, rep)
		}
		if !decodes && !strings.Contains(rep.Error, "bad signal") {
			t.Fatalf("reply to %q, which is not a Signal: %q", msg, rep.Error)
		}
		if !decodes && len(msg) > 0 && !strings.Contains(rep.Error, "message") {
			t.Fatalf("reply to %q does not quote it: %q", msg, rep.Error)
		}
		if err := ws.ReadJSON(&rep); err != nil || rep.Op != "error" || !strings.Contains(rep.Error, "before an offer") {
			t.Fatalf("the socket did not go on after %q: %+v, %v", msg, rep, err)
		}
	})
}

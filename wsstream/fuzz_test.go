package wsstream

import (
	"bytes"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"
)

// fuzzServer reads each WebSocket upgraded on it through a Conn, with
// reads of the size given in the URL's query, and reports what it read.
type fuzzServer struct {
	url  string
	read chan fuzzRead
}

type fuzzRead struct {
	data []byte
	err  error
}

func newFuzzServer(f *testing.F) *fuzzServer {
	s := &fuzzServer{read: make(chan fuzzRead, 1)}
	up := websocket.Upgrader{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ws, err := up.Upgrade(w, r, nil)
		if err != nil {
			s.read <- fuzzRead{err: err}
			return
		}
		c := New(ws)
		defer c.Close()
		c.SetReadDeadline(time.Now().Add(10 * time.Second))
		buf := make([]byte, 1+len(r.URL.RawQuery))
		var got fuzzRead
		for {
			n, err := c.Read(buf)
			got.data = append(got.data, buf[:n]...)
			if err != nil {
				got.err = err
				break
			}
			if n == 0 {
				got.err = errors.New("Read returned 0 bytes and no error")
				break
			}
		}
		s.read <- got
	}))
	f.Cleanup(srv.Close)
	s.url = "ws" + strings.TrimPrefix(srv.URL, "http")
	return s
}

// FuzzRead sends WebSocket messages that the input describes (each a
// type byte, a length byte and the payload; text and binary, some sent in
// fragments), then a close with a code from the input or raw bytes
// straight onto the connection (a broken or hostile peer). The stream
// reads exactly the binary payloads, in order, through reads of any size;
// it ends with io.EOF for a normal or going-away close, with an error
// otherwise, and never hangs.
func FuzzRead(f *testing.F) {
	s := newFuzzServer(f)
	f.Add(uint8(3), []byte("\x02\x06hello \x01\x07skipped\x02\x05world"), uint16(websocket.CloseNormalClosure), []byte(nil))
	f.Add(uint8(0), []byte("\x82\x03abc\x81\x02xy\x02\x00"), uint16(websocket.CloseGoingAway), []byte(nil))
	f.Add(uint8(1), []byte("\x02\x03abc"), uint16(websocket.CloseProtocolError), []byte(nil))
	f.Add(uint8(7), []byte("\x02\x02ab"), uint16(0), []byte("\x82\x85garbage"))
	f.Add(uint8(2), []byte(nil), uint16(0), []byte("\x88\x80\x00\x00\x00\x00"))
	f.Fuzz(func(t *testing.T, readSize uint8, msgs []byte, code uint16, raw []byte) {
		ws, _, err := websocket.DefaultDialer.Dial(s.url+"?"+strings.Repeat("r", int(readSize)), nil)
		if err != nil {
			t.Fatal(err)
		}
		defer ws.Close()
		var want []byte
		for len(msgs) >= 2 {
			typ, n := msgs[0], min(int(msgs[1]), len(msgs)-2)
			p := msgs[2 : 2+n]
			msgs = msgs[2+n:]
			mt := websocket.TextMessage
			if typ&1 == 0 {
				mt = websocket.BinaryMessage
				want = append(want, p...)
			}
			if typ&0x80 == 0 {
				err = ws.WriteMessage(mt, p)
			} else { // in fragments of up to typ&0x7f bytes
				w, err := ws.NextWriter(mt)
				if err != nil {
					t.Fatal(err)
				}
				for q := p; len(q) > 0; q = q[min(len(q), 1+int(typ&0x7f)):] {
					w.Write(q[:min(len(q), 1+int(typ&0x7f))])
				}
				err = w.Close()
			}
			if err != nil {
				t.Fatal(err)
			}
		}
		eof := false
		if raw != nil {
			ws.NetConn().Write(raw)
			ws.NetConn().Close()
		} else {
			// Codes 1005 and 1006 are not sent; a close without a status
			// (an empty payload) is 1005 to the reader, an end of stream.
			payload := []byte{}
			if code != websocket.CloseNoStatusReceived && code != websocket.CloseAbnormalClosure {
				payload = websocket.FormatCloseMessage(int(code), "bye")
			}
			eof = code == websocket.CloseNormalClosure || code == websocket.CloseGoingAway || len(payload) == 0
			if err := ws.WriteMessage(websocket.CloseMessage, payload); err != nil {
				t.Fatal(err)
			}
		}
		var got fuzzRead
		select {
		case got = <-s.read:
		case <-time.After(15 * time.Second):
			t.Fatal("the server's Read did not end")
		}
		var ne interface{ Timeout() bool }
		if errors.As(got.err, &ne) && ne.Timeout() {
			t.Fatalf("Read hung until its deadline after %d bytes (want %d)", len(got.data), len(want))
		}
		if raw != nil {
			// Raw bytes may complete a message or make more; what was sent
			// before them comes first.
			if !bytes.HasPrefix(got.data, want) {
				t.Fatalf("read %q, which does not start with the binary payloads %q", got.data, want)
			}
			if got.err == nil {
				t.Fatal("Read ended without an error")
			}
			return
		}
		if !bytes.Equal(got.data, want) {
			t.Fatalf("read %q, want the binary payloads %q", got.data, want)
		}
		if errors.Is(got.err, io.EOF) != eof {
			t.Fatalf("close code %d: Read ended with %v; want io.EOF: %v", code, got.err, eof)
		}
	})
}

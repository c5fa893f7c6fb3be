package ubiq

import (
	"bytes"
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"
)

// TestClientEndsWhenServerSilent: a server that goes silent (its host
// stopped, a link that drops everything) is pinged once the client read
// nothing for a third of ServerTimeout, and the connection ends, Err
// saying why, when nothing at all came for ServerTimeout. Without this
// the client would wait for TCP to give up (a quarter of an hour), or for
// ever while the server's socket stays open, and a bot would never join
// again.
func TestClientEndsWhenServerSilent(t *testing.T) {
	for _, transport := range []string{"tcp", "ws"} {
		t.Run(transport, func(t *testing.T) {
			pinged := make(chan struct{}, 1)
			saw := func(b []byte) {
				if bytes.Contains(b, []byte(`"Ping"`)) {
					select {
					case pinged <- struct{}{}:
					default:
					}
				}
			}
			var addr string
			if transport == "tcp" {
				addr = serveOne(t, func(c net.Conn) {
					var all []byte
					buf := make([]byte, 4096)
					for { // reads on, answers nothing
						n, err := c.Read(buf)
						all = append(all, buf[:n]...)
						saw(all)
						if err != nil {
							return
						}
					}
				})
			} else {
				up := websocket.Upgrader{}
				hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					ws, err := up.Upgrade(w, r, nil)
					if err != nil {
						return
					}
					defer ws.Close()
					for {
						_, m, err := ws.ReadMessage()
						if err != nil {
							return
						}
						saw(m)
					}
				}))
				t.Cleanup(hs.Close)
				addr = "ws" + strings.TrimPrefix(hs.URL, "http")
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			c, err := Dial(ctx, addr, ClientOptions{ServerTimeout: 300 * time.Millisecond})
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			select {
			case <-c.Done():
			case <-ctx.Done():
				t.Fatal("the connection to a silent server did not end")
			}
			if err := c.Err(); err == nil || !strings.Contains(err.Error(), "nothing from the server") {
				t.Errorf("Err() = %v, want it to say nothing came from the server", err)
			}
			select {
			case <-pinged:
			default:
				t.Error("the client did not ping the silent server before it gave up")
			}
		})
	}
}

// TestClientWatchdogKeepsALiveConnection: an idle client of a live server
// is pinged and answered, to the client id it set, and stays connected.
func TestClientWatchdogKeepsALiveConnection(t *testing.T) {
	ts := startServer(t, nil, nil)
	me := NetworkId{A: 77, B: 5}
	answers := make(chan NetworkId, 100)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := Dial(ctx, ts.tcp, ClientOptions{ServerTimeout: 600 * time.Millisecond, OnFrame: func(f []byte) {
		if typ, err := DecodeServer(f[HeaderSize:], nil); err == nil && typ == "Ping" {
			answers <- IDOf(f)
		}
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.Request("Ping", ClientArgs{ClientID: me}); err != nil {
		t.Fatal(err)
	}
	// The first answer is to that Ping; the others to the watchdog's,
	// which each come after a third of the timeout without a read: past
	// the fourth, the connection lived through more than the timeout.
	for i := range 4 {
		select {
		case to := <-answers:
			if to != me {
				t.Fatalf("answer %d to %v, want the client id set, %v", i, to, me)
			}
		case <-c.Done():
			t.Fatalf("a live server's connection ended: %v", c.Err())
		case <-ctx.Done():
			t.Fatalf("%d answers to Ping, want 4", i)
		}
	}
	select {
	case <-c.Done():
		t.Fatalf("a live server's connection ended: %v", c.Err())
	default:
	}
}

// TestClientWatchdogCountsOnFrame: time the caller spends in OnFrame is
// not the server's silence. A callback that blocked for longer than
// ServerTimeout stopped the reads, and the watchdog ended a live
// connection as if its server had stopped answering.
func TestClientWatchdogCountsOnFrame(t *testing.T) {
	ts := startServer(t, nil, nil)
	for _, transport := range []string{"tcp", "ws"} {
		t.Run(transport, func(t *testing.T) {
			addr := ts.tcp
			if transport == "ws" {
				addr = ts.ws
			}
			const timeout = 300 * time.Millisecond
			me := NetworkId{A: 78, B: 5}
			answers := make(chan struct{}, 100)
			first := true
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			c, err := Dial(ctx, addr, ClientOptions{ServerTimeout: timeout, OnFrame: func(f []byte) {
				if typ, err := DecodeServer(f[HeaderSize:], nil); err != nil || typ != "Ping" || IDOf(f) != me {
					return
				}
				if first { // the caller is busy with the first answer
					first = false
					time.Sleep(4 * timeout)
				}
				answers <- struct{}{}
			}})
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			for i := range 2 {
				if err := c.Request("Ping", ClientArgs{ClientID: me}); err != nil {
					t.Fatal(err)
				}
				select {
				case <-answers:
				case <-c.Done():
					t.Fatalf("Ping %d: the connection ended: %v", i, c.Err())
				case <-ctx.Done():
					t.Fatalf("Ping %d: no answer", i)
				}
			}
			select {
			case <-c.Done():
				t.Fatalf("the connection ended: %v", c.Err())
			default:
			}
		})
	}
}

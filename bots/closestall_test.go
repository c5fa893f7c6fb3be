package bots

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/xrealm/xrealm/mqttwire"
)

// fakeBroker accepts one MQTT connection over TCP, answers its CONNECT
// with a CONNACK and hands the connection and its reader to serve. It
// returns the address.
func fakeBroker(t *testing.T, serve func(c net.Conn, rd *mqttwire.Reader)) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		rd := mqttwire.NewReader(512, mqttwire.MaxLength(1<<10))
		if _, _, err := mqttwire.ReadPacket(c, rd); err != nil { // CONNECT
			return
		}
		c.Write([]byte{0x20, 2, 0, 0})
		serve(c, rd)
	}()
	return ln.Addr().String()
}

// within fails the test when f has not returned d after it was called.
func within(t *testing.T, d time.Duration, what string, f func()) {
	t.Helper()
	done := make(chan struct{})
	go func() { f(); close(done) }()
	select {
	case <-done:
	case <-time.After(d):
		t.Fatalf("%s still waiting %s after it was called", what, d)
	}
}

// stalledBroker accepts one MQTT connection, over TCP or WebSocket,
// answers its CONNECT, and then reads no more once the first byte of the
// next packet has arrived, which it reports on the channel it returns: a
// server that stopped reading (stopped, overloaded, or behind a link that
// dropped everything), whose socket buffers fill up under a large write.
// Over TCP, a SUBSCRIBE first gets its SUBACK, as a bot's join needs.
func stalledBroker(t *testing.T, overWS bool) (addr string, writing <-chan struct{}) {
	t.Helper()
	started := make(chan struct{})
	quit := make(chan struct{})
	t.Cleanup(func() { close(quit) })
	if !overWS {
		return fakeBroker(t, func(c net.Conn, rd *mqttwire.Reader) {
			for {
				if rd.Buffered() == 0 {
					n, err := c.Read(rd.Space()[:1])
					rd.Advance(n)
					if err != nil {
						return
					}
				}
				if rd.Bytes()[0]>>4 != 8 { // not a SUBSCRIBE: stop reading
					break
				}
				_, body, err := mqttwire.ReadPacket(c, rd)
				if err != nil || len(body) < 2 {
					return
				}
				c.Write([]byte{0x90, 3, body[0], body[1], 0}) // SUBACK, QoS 0
			}
			close(started)
			<-quit
		}), started
	}
	up := websocket.Upgrader{Subprotocols: []string{"mqtt"}}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ws, err := up.Upgrade(w, r, nil)
		if err != nil {
			return
		}
		defer ws.Close()
		if _, _, err := ws.ReadMessage(); err != nil { // CONNECT
			return
		}
		ws.WriteMessage(websocket.BinaryMessage, []byte{0x20, 2, 0, 0})
		_, m, err := ws.NextReader()
		if err != nil {
			return
		}
		if _, err := m.Read(make([]byte, 1)); err != nil {
			return
		}
		close(started)
		<-quit
	}))
	t.Cleanup(srv.Close)
	return "ws" + strings.TrimPrefix(srv.URL, "http") + "/mqtt", started
}

// Close ends a connection whose server stopped reading while a publish
// was blocked writing to it. It fails if Close waits for the write lock
// that the blocked publish holds, and so for ever while the server's
// socket stays open: Fleet.Close, and with it `xrealm bots` on Ctrl-C,
// would hang.
func TestMQTTClientCloseEndsBlockedPublish(t *testing.T) {
	for _, tc := range []struct {
		name   string
		overWS bool
	}{
		{"tcp", false},
		{"websocket", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			addr, writing := stalledBroker(t, tc.overWS)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			c, err := DialMQTT(ctx, MQTTConfig{Addr: addr, ClientID: "c"})
			if err != nil {
				t.Fatal(err)
			}
			// Far more than the socket buffers of both ends hold: the
			// write cannot finish while the server does not read.
			big := make([]byte, 64<<20)
			published := make(chan error, 1)
			go func() { published <- c.Publish("realm/s/public/x/u/c/cam", big) }()
			select {
			case <-writing:
			case <-ctx.Done():
				t.Fatal("the publish did not reach the server")
			}
			within(t, 30*time.Second, "Close, behind a publish blocked in its write", func() { c.Close() })
			select {
			case err := <-published:
				if err == nil {
					t.Error("the blocked publish reported success")
				}
			case <-time.After(30 * time.Second):
				t.Fatal("the publish still blocked 30 s after Close returned")
			}
		})
	}
}

// Stop returns while a bot's sender is blocked writing to a server that
// stopped reading: after a grace, the bot's connection is closed to end
// the write. It fails if Stop waits for every sender, for ever: `xrealm
// bots` would hang on Ctrl-C (it stops the senders before it closes the
// fleet).
func TestFleetStopEndsBlockedSender(t *testing.T) {
	addr, writing := stalledBroker(t, false)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	// Poses far larger than the socket buffers: the first blocks.
	tr := &MQTTTransport{Addr: addr, PayloadSize: 64 << 20}
	f, err := StartFleet(ctx, FleetConfig{Transport: tr, Users: 1, Rate: 100, Behaviour: Spec{Name: "static"}, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	select {
	case <-writing:
	case <-ctx.Done():
		t.Fatal("no pose reached the server")
	}
	within(t, 30*time.Second, "Stop, for a sender blocked in its write", f.Stop)
}

// A server that answers one SUBSCRIBE with several SUBACKs does not stop
// the client. It fails if the read goroutine hands each to the waiting
// Subscribe through a channel of one: it then blocks for ever on the third
// once Subscribe has taken the first and before it leaves (the connection
// never ends, and Close waits for it).
func TestMQTTClientRepeatedSubacks(t *testing.T) {
	for _, acks := range []int{1, 2, 3, 10} {
		t.Run(fmt.Sprint(acks), func(t *testing.T) {
			addr := fakeBroker(t, func(c net.Conn, rd *mqttwire.Reader) {
				_, body, err := mqttwire.ReadPacket(c, rd) // SUBSCRIBE
				if err != nil || len(body) < 2 {
					return
				}
				var out []byte
				for range acks {
					out = append(out, 0x90, 3, body[0], body[1], 0)
				}
				out = append(out, publishPacket("realm/s/p/s/u/c/cam", "after")...)
				c.Write(out)
				io.Copy(io.Discard, c)
			})
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			got := make(chan string, 1)
			c, err := DialMQTT(ctx, MQTTConfig{Addr: addr, ClientID: "c", OnPublish: func(_, payload []byte, _ int64) {
				select {
				case got <- string(payload):
				default:
				}
			}})
			if err != nil {
				t.Fatal(err)
			}
			if err := c.Subscribe(ctx, "realm/s/p/s/+/+/+"); err != nil {
				t.Fatal(err)
			}
			select {
			case p := <-got:
				if p != "after" {
					t.Fatalf("got %q", p)
				}
			case <-ctx.Done():
				t.Fatal("the PUBLISH after the SUBACKs never arrived: the read goroutine is stuck")
			}
			within(t, 30*time.Second, "Close", func() { c.Close() })
		})
	}
}

// A server that goes silent (its host suspended, or a link that drops
// everything) ends the connection after one and a half keepalives without
// a byte from it, PINGRESP included, as browsers' MQTT clients do; with
// FleetConfig.Reconnect the bot then joins again. It fails if the client
// sends PINGREQ only when it has written nothing else, or never looks for
// the answer: a bot that keeps publishing then waits for TCP to give up (a
// quarter of an hour), or for ever while the server's socket stays open.
func TestMQTTClientEndsWhenServerSilent(t *testing.T) {
	for _, tc := range []struct {
		name    string
		publish bool // publish all along: PINGREQ is not sent for lack of writes
	}{
		{"idle", false},
		{"publishing", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			addr := fakeBroker(t, func(c net.Conn, _ *mqttwire.Reader) {
				io.Copy(io.Discard, c) // reads on, answers nothing
			})
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			c, err := DialMQTT(ctx, MQTTConfig{Addr: addr, ClientID: "c", Keepalive: time.Second})
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			if tc.publish {
				go func() {
					for ctx.Err() == nil && c.Publish("realm/s/p/s/u/c/cam", []byte("{}")) == nil {
						time.Sleep(50 * time.Millisecond)
					}
				}()
			}
			select {
			case <-c.Done():
			case <-ctx.Done():
				t.Fatal("the connection to a silent server did not end")
			}
			if err := c.Err(); err == nil || !strings.Contains(err.Error(), "nothing from the server") {
				t.Errorf("Err() = %v, want it to say nothing came from the server", err)
			}
		})
	}
}

// An OnPublish that takes longer than one and a half keepalives (a slow
// consumer of the poses) is not a silent server. It fails if the read time
// is taken before the callbacks run: the keepalive then ends a live
// connection.
func TestMQTTClientSlowOnPublishIsNotSilence(t *testing.T) {
	addr := fakeBroker(t, func(c net.Conn, rd *mqttwire.Reader) {
		c.Write(publishPacket("realm/s/p/s/u/c/cam", "slow"))
		for {
			first, _, err := mqttwire.ReadPacket(c, rd)
			if err != nil {
				return
			}
			if first>>4 == 12 { // PINGREQ
				c.Write([]byte{0xd0, 0})
			}
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	returned := make(chan struct{})
	c, err := DialMQTT(ctx, MQTTConfig{Addr: addr, ClientID: "c", Keepalive: time.Second, OnPublish: func(_, _ []byte, _ int64) {
		time.Sleep(2500 * time.Millisecond)
		close(returned)
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	select {
	case <-returned:
	case <-c.Done():
		t.Fatalf("the connection ended while OnPublish ran: %v", c.Err())
	case <-ctx.Done():
		t.Fatal("OnPublish never returned")
	}
	select {
	case <-c.Done():
		t.Fatalf("the connection ended after a slow OnPublish: %v", c.Err())
	case <-time.After(time.Second):
	}
}

package mqtt

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/eclipse/paho.mqtt.golang/packets"
	"github.com/nats-io/nats.go"

	"github.com/xrealm/xrealm/auth"
	"github.com/xrealm/xrealm/bus"
)

// rightsEnv is an MQTT front end on its own bus with the key that signs
// its tokens, and a NATS connection that sees what the front end
// publishes.
type rightsEnv struct {
	s     *Server
	addr  string
	keys  *auth.Keys
	front *nats.Conn
	watch *nats.Conn
}

func newRightsEnv(t *testing.T, insecure bool) *rightsEnv {
	t.Helper()
	dir := t.TempDir()
	b, err := bus.Start(bus.Config{DataDir: dir, Name: "mqtt-rights", Insecure: true, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Shutdown)
	e := &rightsEnv{}
	if e.front, err = b.Connect("front", nats.NoEcho()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.front.Close)
	if e.watch, err = b.Connect("watch"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.watch.Close)
	if e.keys, err = auth.LoadOrCreateKeys(dir); err != nil {
		t.Fatal(err)
	}
	if e.s, err = NewServer(Config{NC: e.front, Realm: "realm", Verifier: e.keys, Insecure: insecure, Logger: slog.New(slog.DiscardHandler)}); err != nil {
		t.Fatal(err)
	}
	e.addr = serveTCP(t, e.s)
	return e
}

// serveTCP serves s on a loopback port until the test ends, and returns
// the port's address.
func serveTCP(tb testing.TB, s *Server) string {
	tb.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	go s.Serve(l, "tcp")
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = s.Shutdown(ctx)
	})
	return l.Addr().String()
}

func (e *rightsEnv) token(t *testing.T, user string, r auth.Rights) string {
	t.Helper()
	tok, err := e.keys.Issue(user, r, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// mqttClient is a raw MQTT connection to the front end.
type mqttClient struct {
	nc net.Conn
	br *bufio.Reader
}

// dial connects as user with token and client id id, with a will if
// willTopic is not empty, and waits for an accepting CONNACK.
func (e *rightsEnv) dial(t *testing.T, id, user, token, willTopic, will string) *mqttClient {
	t.Helper()
	nc, err := net.Dial("tcp", e.addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	nc.SetDeadline(time.Now().Add(10 * time.Second)) // a hang fails the test instead of stalling it
	cc := packets.NewControlPacket(packets.Connect).(*packets.ConnectPacket)
	cc.ProtocolName, cc.ProtocolVersion, cc.CleanSession, cc.Keepalive = "MQTT", 4, true, 60
	cc.ClientIdentifier = id
	cc.UsernameFlag, cc.Username, cc.PasswordFlag, cc.Password = true, user, true, []byte(token)
	if willTopic != "" {
		cc.WillFlag, cc.WillTopic, cc.WillMessage = true, willTopic, []byte(will)
	}
	if _, err := nc.Write(encodePacket(cc)); err != nil {
		t.Fatal(err)
	}
	c := &mqttClient{nc: nc, br: bufio.NewReader(nc)}
	ack, err := packets.ReadPacket(c.br)
	if err != nil {
		t.Fatalf("%s (user %s): no CONNACK: %v", id, user, err)
	}
	if ca, ok := ack.(*packets.ConnackPacket); !ok || ca.ReturnCode != packets.Accepted {
		t.Fatalf("%s (user %s): CONNACK %v, want accepted", id, user, ack)
	}
	return c
}

// alive reports whether the server still serves c: it answers a PINGREQ
// with a PINGRESP, rather than closing the connection.
func (c *mqttClient) alive(t *testing.T) bool {
	t.Helper()
	if _, err := c.nc.Write(encodePacket(packets.NewControlPacket(packets.Pingreq))); err != nil {
		return false
	}
	for {
		p, err := packets.ReadPacket(c.br)
		var ne net.Error
		switch {
		case errors.As(err, &ne) && ne.Timeout():
			t.Fatal("no PINGRESP and no close within 10 s")
		case err != nil:
			return false
		}
		if _, ok := p.(*packets.PingrespPacket); ok {
			return true
		}
	}
}

// A client id is no secret: it is the userClient level of the client's
// topics, which everyone in the scene receives. A connection of another
// user with the same client id must not take the session over (closing
// the victim's connection and publishing its will); one of the same user
// still does, as MQTT's session takeover asks.
func TestTakeoverOnlyBySameUser(t *testing.T) {
	e := newRightsEnv(t, false)
	editor := auth.SceneRights("realm", "alice", "lab", auth.RoleEditor, "")
	viewer := auth.SceneRights("realm", "alice", "lab", auth.RoleViewer, "")
	const id = "pyClient-123456"
	victim := e.dial(t, id, "alice", e.token(t, "alice", editor), "", "")
	// An anonymous viewer of the same scene connects with the editor's id.
	intruder := e.dial(t, id, "anonymous-mallory", e.token(t, "anonymous-mallory", viewer), "", "")
	if !victim.alive(t) {
		t.Fatal("a connection of another user with the same client id closed the victim's connection")
	}
	if !intruder.alive(t) {
		t.Fatal("the other user's connection was closed")
	}
	// The same user reconnecting takes its session over.
	again := e.dial(t, id, "alice", e.token(t, "alice", editor), "", "")
	if victim.alive(t) {
		t.Fatal("a new connection of the same user and client id did not take the session over")
	}
	if !again.alive(t) || !intruder.alive(t) {
		t.Fatal("after the takeover, the new connection or the other user's is closed")
	}
	if !e.s.Kick(id, "test") {
		t.Fatal("Kick found no connection with the client id")
	}
	if again.alive(t) || intruder.alive(t) {
		t.Fatal("Kick left a connection with the client id open")
	}
}

// An anonymous user's name is the display name it asked for: anyone can
// get a token for anonymous-bob. So an anonymous connection takes over only
// from a connection with the same token, not from any with the same name
// and client id (both of which the scene's presence messages show).
func TestAnonymousTakeoverNeedsSameToken(t *testing.T) {
	e := newRightsEnv(t, false)
	viewer := auth.SceneRights("realm", "alice", "lab", auth.RoleViewer, "")
	const id = "xr-abcd1234"
	bobs := e.token(t, "anonymous-bob", viewer)
	bob := e.dial(t, id, "anonymous-bob", bobs, "", "")
	mallory := e.dial(t, id, "anonymous-bob", e.token(t, "anonymous-bob", viewer), "", "")
	if !bob.alive(t) || !mallory.alive(t) {
		t.Fatal("another token of the same anonymous name took the session over")
	}
	again := e.dial(t, id, "anonymous-bob", bobs, "", "")
	if bob.alive(t) {
		t.Fatal("a new connection with the same anonymous token did not take the session over")
	}
	if !again.alive(t) || !mallory.alive(t) {
		t.Fatal("after the takeover, the new connection or the other token's is closed")
	}
}

// A last will on a '$' topic is not published, as a PUBLISH there is not:
// clients never reach NATS's own $ subjects, whatever their rights (a
// right that names a $ topic, or --insecure).
func TestWillOnDollarTopicNotPublished(t *testing.T) {
	for _, insecure := range []bool{false, true} {
		name := "token"
		if insecure {
			name = "insecure"
		}
		t.Run(name, func(t *testing.T) {
			e := newRightsEnv(t, insecure)
			seen := make(chan *nats.Msg, 64)
			for _, subj := range []string{"$XREALM.>", "realm.>"} {
				if _, err := e.watch.ChanSubscribe(subj, seen); err != nil {
					t.Fatal(err)
				}
			}
			if err := e.watch.Flush(); err != nil {
				t.Fatal(err)
			}
			r := auth.Rights{Publ: []string{"$XREALM/#", "realm/s/alice/lab/#"}}
			tok := e.token(t, "alice", r)
			const dollar = "$XREALM/persist/deletescene"
			c := e.dial(t, "c1", "alice", tok, dollar, `{"namespace":"alice","scene":"lab"}`)
			// A second client's will, on an allowed topic, marks the end:
			// the front end publishes both on one NATS connection, in order.
			marker := e.dial(t, "c2", "alice", tok, "realm/s/alice/lab/x/c2/c2", `{"object_id":"c2","action":"leave"}`)
			for _, cl := range []*mqttClient{c, marker} {
				// A packet of the reserved type 0 is a protocol violation:
				// the server ends the session as after a network failure,
				// will included, and then closes the socket.
				if _, err := cl.nc.Write([]byte{0x00, 0x00}); err != nil {
					t.Fatal(err)
				}
				if _, err := io.Copy(io.Discard, cl.br); err != nil {
					t.Fatalf("waiting for the server to close the connection: %v", err)
				}
			}
			if err := e.front.Flush(); err != nil {
				t.Fatal(err)
			}
			for {
				select {
				case m := <-seen:
					if m.Subject == "realm.s.alice.lab.x.c2.c2" {
						return
					}
					t.Fatalf("the will on %s was published, as %s %s", dollar, m.Subject, m.Data)
				case <-time.After(10 * time.Second):
					t.Fatal("the marker will was not published within 10 s")
				}
			}
		})
	}
}

// subscribe sends one SUBSCRIBE of filters at QoS 0 and returns the
// SUBACK's codes.
func (c *mqttClient) subscribe(t *testing.T, id uint16, filters ...string) []byte {
	t.Helper()
	p := packets.NewControlPacket(packets.Subscribe).(*packets.SubscribePacket)
	p.MessageID, p.Topics, p.Qoss = id, filters, make([]byte, len(filters))
	if _, err := c.nc.Write(encodePacket(p)); err != nil {
		t.Fatal(err)
	}
	return c.suback(t, id)
}

func (c *mqttClient) suback(t *testing.T, id uint16) []byte {
	t.Helper()
	for {
		p, err := packets.ReadPacket(c.br)
		if err != nil {
			t.Fatalf("waiting for SUBACK %d: %v", id, err)
		}
		if sa, ok := p.(*packets.SubackPacket); ok && sa.MessageID == id {
			return sa.ReturnCodes
		}
	}
}

// A connection may hold at most MaxSubscriptions filters: each is matched
// against every message of its scene, for all the scene's subscribers,
// and a viewer's rights cover any number of filters in the scene.
func TestSubscriptionLimit(t *testing.T) {
	e := newRightsEnv(t, false)
	viewer := auth.SceneRights("realm", "alice", "lab", auth.RoleViewer, "")
	c := e.dial(t, "v1", "anonymous-v", e.token(t, "anonymous-v", viewer), "", "")
	filter := func(i int) string { return "realm/s/alice/lab/o/c/" + strconv.Itoa(i) }
	var all []string
	for i := range MaxSubscriptions {
		all = append(all, filter(i))
	}
	for i, code := range c.subscribe(t, 1, all...) {
		if code != 0 {
			t.Fatalf("filter %d of %d refused (SUBACK code %#x)", i+1, MaxSubscriptions, code)
		}
	}
	if got := c.subscribe(t, 2, filter(MaxSubscriptions), filter(0)); !bytes.Equal(got, []byte{0x80, 0}) {
		t.Fatalf("SUBACK codes %#x for one filter more than the limit and one held already, want [0x80 0]", got)
	}
	un := packets.NewControlPacket(packets.Unsubscribe).(*packets.UnsubscribePacket)
	un.MessageID, un.Topics = 3, []string{filter(0)}
	if _, err := c.nc.Write(encodePacket(un)); err != nil {
		t.Fatal(err)
	}
	if got := c.subscribe(t, 4, filter(MaxSubscriptions)); !bytes.Equal(got, []byte{0}) {
		t.Fatalf("SUBACK codes %#x after an UNSUBSCRIBE made room, want [0]", got)
	}
	if !c.alive(t) {
		t.Fatal("the connection was closed")
	}
}

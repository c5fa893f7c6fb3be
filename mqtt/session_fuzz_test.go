package mqtt

import (
	"bufio"
	"bytes"
	"errors"
	"log/slog"
	"net"
	"testing"
	"time"

	"github.com/eclipse/paho.mqtt.golang/packets"
	"github.com/nats-io/nats.go"

	"github.com/xrealm/xrealm/auth"
	"github.com/xrealm/xrealm/bus"
	"github.com/xrealm/xrealm/topic"
)

// sessionEnv is an MQTT front end on its own bus, with a NATS subscriber
// that sees every message the front end puts on the bus.
type sessionEnv struct {
	s        *Server
	addr     string
	front    *nats.Conn
	watch    *nats.Conn
	seen     chan *nats.Msg
	tokens   []string      // viewer limited to cam_1, editor, viewer of any client
	rights   []auth.Rights // of each token
	username string
}

func newSessionEnv(tb testing.TB) *sessionEnv {
	tb.Helper()
	dir := tb.TempDir()
	b, err := bus.Start(bus.Config{DataDir: dir, Name: "mqtt-fuzz", Insecure: true, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(b.Shutdown)
	e := &sessionEnv{seen: make(chan *nats.Msg, 1<<16), username: "viewer"}
	if e.front, err = b.Connect("front", nats.NoEcho()); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(e.front.Close)
	if e.watch, err = b.Connect("watch"); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(e.watch.Close)
	if _, err := e.watch.ChanSubscribe(">", e.seen); err != nil {
		tb.Fatal(err)
	}
	keys, err := auth.LoadOrCreateKeys(dir)
	if err != nil {
		tb.Fatal(err)
	}
	for _, r := range []auth.Rights{
		auth.SceneRights("realm", "public", "lobby", auth.RoleViewer, "cam_1"),
		auth.SceneRights("realm", "public", "lobby", auth.RoleEditor, ""),
		auth.SceneRights("realm", "public", "lobby", auth.RoleViewer, ""),
	} {
		tok, err := keys.Issue(e.username, r, time.Hour)
		if err != nil {
			tb.Fatal(err)
		}
		e.tokens, e.rights = append(e.tokens, tok), append(e.rights, r)
	}
	if e.s, err = NewServer(Config{NC: e.front, Realm: "realm", Verifier: keys, MaxPayload: 1 << 16, Logger: slog.New(slog.DiscardHandler)}); err != nil {
		tb.Fatal(err)
	}
	e.addr = serveTCP(tb, e.s)
	return e
}

func encodePacket(cp packets.ControlPacket) []byte {
	var b bytes.Buffer
	_ = cp.Write(&b)
	return b.Bytes()
}

// FuzzSession connects to the MQTT front end with a token (a viewer of
// one client, an editor, a viewer of any client; optionally with a last
// will), sends the fuzzed bytes as the rest of the session, then PINGREQ
// and a packet of a reserved type, and ends its input. Whatever the bytes,
// the server must not crash or hang: it closes the connection and forgets
// it. And everything the session put on the bus (the will included) is
// allowed by the token: a topic its publ rights match, or a clientEvent
// where its evts rights do.
func FuzzSession(f *testing.F) {
	e := newSessionEnv(f)
	pub := func(name, payload string, qos byte, id uint16) []byte {
		p := packets.NewControlPacket(packets.Publish).(*packets.PublishPacket)
		p.TopicName, p.Payload, p.Qos, p.MessageID = name, []byte(payload), qos, id
		return encodePacket(p)
	}
	sub := func(id uint16, filters ...string) []byte {
		p := packets.NewControlPacket(packets.Subscribe).(*packets.SubscribePacket)
		p.MessageID, p.Topics, p.Qoss = id, filters, make([]byte, len(filters))
		return encodePacket(p)
	}
	unsub := func(id uint16, filters ...string) []byte {
		p := packets.NewControlPacket(packets.Unsubscribe).(*packets.UnsubscribePacket)
		p.MessageID, p.Topics = id, filters
		return encodePacket(p)
	}
	join := func(bs ...[]byte) []byte { return bytes.Join(bs, nil) }
	base := "realm/s/public/lobby/"
	for role := range uint8(3) {
		f.Add(join(sub(1, base+"#"), pub(base+"x/cam_1", `{"object_id":"cam_1","action":"update"}`, 0, 0)), role, "", []byte(nil))
		f.Add(join(pub(base+"o/cam_1/box", `{"object_id":"box","action":"clientEvent","type":"mousedown"}`, 1, 2),
			pub(base+"o/cam_1/box", `{"object_id":"box","action":"create"}`, 2, 3),
			pub(base+"o/other/box", `{"object_id":"box","action":"clientEvent"}`, 0, 0)), role, base+"x/cam_1", []byte("bye"))
		f.Add(join(sub(2, "#", "realm/s/+/lobby/#", "$SYS/#", "a/#/b"), unsub(3, "#"), pub("realm/s/private/room/o/x/y", "{}", 1, 4),
			pub("$NETWORK/latency", "", 0, 0), pub("a/+/b", "", 0, 0), pub("", "", 0, 0)), role, "realm/s/private/room/x/y", []byte("{}"))
		f.Add(join([]byte{0x62, 0x02, 0x00, 0x03}, []byte{0x40, 0x02, 0x00, 0x09}, []byte{0xe0, 0x00}, pub(base+"x/cam_1", "after", 0, 0)), role, "", []byte(nil))
		f.Add([]byte{0x30, 0xff, 0xff, 0xff, 0xff, 0x01}, role, "", []byte(nil))
		f.Add([]byte{0x10, 0x0c, 0x00, 0x04, 'M', 'Q', 'T', 'T', 0x04, 0x02, 0x00, 0x3c, 0x00, 0x00}, role, "#", []byte("x"))
	}
	f.Fuzz(func(t *testing.T, stream []byte, role uint8, willTopic string, willMsg []byte) {
		role %= uint8(len(e.tokens))
		rights := e.rights[role]
		drain(e.seen)
		cc := packets.NewControlPacket(packets.Connect).(*packets.ConnectPacket)
		cc.ProtocolName, cc.ProtocolVersion, cc.CleanSession, cc.Keepalive = "MQTT", 4, true, 30
		cc.ClientIdentifier = "fuzz"
		cc.UsernameFlag, cc.Username = true, e.username
		cc.PasswordFlag, cc.Password = true, []byte(e.tokens[role])
		if willTopic != "" {
			cc.WillFlag, cc.WillTopic, cc.WillMessage, cc.WillQos = true, willTopic, willMsg, 0
		}
		nc, err := net.Dial("tcp", e.addr)
		if err != nil {
			t.Fatal(err)
		}
		defer nc.Close()
		nc.SetDeadline(time.Now().Add(10 * time.Second))
		if _, err := nc.Write(encodePacket(cc)); err != nil {
			t.Fatal(err)
		}
		br := bufio.NewReader(nc)
		ack, err := packets.ReadPacket(br)
		if err != nil {
			if willTopic != "" && len(willTopic) > 65535 {
				return
			}
			t.Fatalf("no CONNACK: %v", err)
		}
		if ca, ok := ack.(*packets.ConnackPacket); !ok || ca.ReturnCode != packets.Accepted {
			return // a will the CONNECT cannot carry (Validate refuses it)
		}
		go func() {
			_, _ = nc.Write(stream)
			_, _ = nc.Write([]byte{0xc0, 0x00}) // PINGREQ
			// A packet of the reserved type 0 ends the session at once
			// (the server runs its cleanup, will included, then closes);
			// the end of input ends it when the stream left a packet
			// unfinished.
			_, _ = nc.Write([]byte{0x00, 0x00})
			_ = nc.(*net.TCPConn).CloseWrite()
		}()
		for {
			if _, err := packets.ReadPacket(br); err != nil {
				if ne := net.Error(nil); errors.As(err, &ne) && ne.Timeout() {
					t.Fatalf("the server did not close the connection within 10 s")
				}
				break
			}
		}
		nc.Close()
		deadline := time.Now().Add(10 * time.Second)
		for e.s.Connections() != 0 {
			if time.Now().After(deadline) {
				t.Fatalf("%d connections left after the client closed", e.s.Connections())
			}
			time.Sleep(time.Millisecond)
		}
		if err := e.front.Flush(); err != nil {
			t.Fatal(err)
		}
		if err := e.watch.Flush(); err != nil {
			t.Fatal(err)
		}
		for {
			select {
			case m := <-e.seen:
				name, err := topic.FromSubject(m.Subject)
				if err != nil {
					continue // not an MQTT topic: bus traffic of the server itself
				}
				if !rights.CanPublish(name) && !(rights.EventOnly(name) && auth.IsClientEvent(m.Data)) {
					t.Fatalf("token %d: the session put %q on %q, which its rights %+v do not allow", role, m.Data, name, rights)
				}
			default:
				return
			}
		}
	})
}

func drain(ch chan *nats.Msg) {
	for {
		select {
		case <-ch:
		default:
			return
		}
	}
}

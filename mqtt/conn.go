package mqtt

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/eclipse/paho.mqtt.golang/packets"
	"github.com/nats-io/nats.go"
	"github.com/xrealm/xrealm/auth"
	"github.com/xrealm/xrealm/fanout"
	"github.com/xrealm/xrealm/mqttwire"
	"github.com/xrealm/xrealm/persist"
	"github.com/xrealm/xrealm/streamread"
	"github.com/xrealm/xrealm/topic"
)

const (
	connectTimeout = 10 * time.Second
	durableTimeout = 30 * time.Second // longest wait for JetStream to store a QoS 1 object message
)

// conn is one MQTT client connection.
type conn struct {
	s         *Server
	nc        net.Conn
	transport string
	log       *slog.Logger
	w         *fanout.Writer

	clientID  string
	user      string
	anonToken string // an anonymous user's token digest, part of its takeover key (clientKey)
	rights    auth.Rights
	all       bool // insecure mode: every right

	subs    map[string]byte // filter -> granted qos; read loop only
	pubOK   map[string]bool // publish-right cache by topic; read loop only
	nextID  atomic.Uint32
	lastSeq atomic.Uint64
	self    atomic.Pointer[string] // userClient of this client's own user messages
	// actedAt is when the client last published something other than a
	// pose (a click, an object edit), in ns since the hub's epoch; 0: never.
	actedAt atomic.Int64
	denies  int

	will     *packets.PublishPacket
	closeMu  sync.Mutex
	closed   bool
	closing  atomic.Bool // set with closed; read by the read loop without the lock
	graceful bool
	reason   string
}

func newConn(s *Server, nc net.Conn, transport string) *conn {
	return &conn{s: s, nc: nc, transport: transport, log: s.log.With("remote", nc.RemoteAddr().String(), "transport", transport)}
}

// close ends the connection; the read loop then cleans up.
func (c *conn) close(reason string) {
	c.closeMu.Lock()
	if c.closed {
		c.closeMu.Unlock()
		return
	}
	c.closed = true
	c.closing.Store(true)
	c.reason = reason
	c.closeMu.Unlock()
	// On its own goroutine: closing a plain socket waits until its reader
	// has left the read callback (streamread.Receive), which may be the
	// caller (a DISCONNECT, a failed publish) or busy with a packet.
	go c.nc.Close()
}

func (c *conn) serve() {
	defer c.nc.Close()
	d := &decoder{maxPublish: c.s.cfg.MaxPayload}
	// The reader's own buffer holds only what a read leaves of a packet
	// not yet complete: reads from a plain socket land in a shared buffer.
	rd := mqttwire.NewReader(4<<10, d.limit)
	c.nc.SetReadDeadline(time.Now().Add(connectTimeout))
	first, body, err := mqttwire.ReadPacket(c.nc, rd)
	if err != nil {
		c.log.Info("MQTT connection closed before CONNECT", "err", err)
		return
	}
	cp, err := d.decode(first, body)
	if err != nil {
		c.log.Warn("MQTT protocol violation: malformed first packet", "err", err)
		return
	}
	cc, ok := cp.(*packets.ConnectPacket)
	if !ok {
		c.log.Warn("MQTT protocol violation: first packet is not CONNECT", "packet", strings.SplitN(cp.String(), " ", 2)[0])
		return
	}
	keepalive, ok := c.connect(cc)
	if !ok {
		return
	}
	m := c.s.m
	m.Connections.Inc()
	defer m.Connections.Dec()
	defer c.cleanup()

	handle := func() error {
		for {
			if c.closing.Load() {
				return net.ErrClosed
			}
			cp, ok, err := d.next(rd)
			if err != nil {
				var tooLarge errTooLarge
				if errors.As(err, &tooLarge) {
					m.Oversized.Inc()
					c.s.denials.Deny(c.log, "PUBLISH refused: payload too large", "size", tooLarge.size, "limit", tooLarge.limit, "qos", tooLarge.qos)
					if tooLarge.hasID {
						c.ack(tooLarge.qos, tooLarge.id)
					}
					continue
				}
				return err
			}
			if !ok {
				return nil
			}
			if err := c.handle(cp, d.frame); err != nil {
				return err
			}
		}
	}
	err = handle() // packets that came with the CONNECT
	if err == nil {
		err = streamread.Receive(c.nc, &rd.Buffer, streamread.Options{Stop: c.closing.Load, Idle: keepalive * 3 / 2}, handle)
	}
	c.readError(err)
}

// handle acts on one packet after the CONNECT; frame is the QoS 0 frame of
// a PUBLISH (decoder.frame). It returns net.ErrClosed when it closed the
// connection.
func (c *conn) handle(cp packets.ControlPacket, frame []byte) error {
	switch p := cp.(type) {
	case *packets.PublishPacket:
		c.publish(p, frame)
	case *packets.PubrelPacket:
		c.send(&packets.PubcompPacket{FixedHeader: packets.FixedHeader{MessageType: packets.Pubcomp}, MessageID: p.MessageID})
	case *packets.PubackPacket, *packets.PubrecPacket, *packets.PubcompPacket:
		// Deliveries to clients are not retried; nothing to track.
		if rec, ok := p.(*packets.PubrecPacket); ok {
			c.send(&packets.PubrelPacket{FixedHeader: packets.FixedHeader{MessageType: packets.Pubrel, Qos: 1}, MessageID: rec.MessageID})
		}
	case *packets.SubscribePacket:
		c.subscribe(p)
	case *packets.UnsubscribePacket:
		for _, f := range p.Topics {
			if _, ok := c.subs[f]; ok {
				delete(c.subs, f)
				c.s.hub.remove(c, f)
			}
		}
		c.send(&packets.UnsubackPacket{FixedHeader: packets.FixedHeader{MessageType: packets.Unsuback}, MessageID: p.MessageID})
	case *packets.PingreqPacket:
		c.send(&packets.PingrespPacket{FixedHeader: packets.FixedHeader{MessageType: packets.Pingresp}})
	case *packets.DisconnectPacket:
		c.graceful = true
		c.close("client disconnected")
		return net.ErrClosed
	default:
		c.log.Warn("MQTT protocol violation: unexpected packet", "packet", cp.String())
		c.close("protocol violation")
		return net.ErrClosed
	}
	return nil
}

func (c *conn) readError(err error) {
	c.closeMu.Lock()
	reason := c.reason
	c.closeMu.Unlock()
	switch {
	case reason != "":
		c.log.Info("MQTT connection closed", "reason", reason)
	case errors.Is(err, io.EOF), errors.Is(err, net.ErrClosed):
		c.log.Info("MQTT connection closed by client")
	default:
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			c.log.Info("MQTT connection closed: keepalive expired")
		} else {
			c.log.Warn("MQTT connection closed on a read error", "err", err)
		}
	}
}

// connect authenticates the CONNECT and answers it. It returns the
// keepalive and whether the connection may go on.
func (c *conn) connect(cc *packets.ConnectPacket) (time.Duration, bool) {
	m := c.s.m
	refuse := func(code byte, result, why string) (time.Duration, bool) {
		m.Connects.WithLabelValues(result).Inc()
		if code == packets.ErrRefusedNotAuthorised || code == packets.ErrRefusedBadUsernameOrPassword {
			m.AuthDenials.WithLabelValues("connect").Inc()
		}
		c.s.denials.Deny(c.log, "MQTT CONNECT refused", "client", cc.ClientIdentifier, "user", cc.Username, "reason", why)
		c.nc.SetWriteDeadline(time.Now().Add(5 * time.Second))
		c.nc.Write(encode(&packets.ConnackPacket{FixedHeader: packets.FixedHeader{MessageType: packets.Connack}, ReturnCode: code}))
		return 0, false
	}
	if code := cc.Validate(); code != packets.Accepted {
		return refuse(code, "invalid", packets.ConnackReturnCodes[code])
	}
	c.clientID = cc.ClientIdentifier
	if c.clientID == "" {
		c.clientID = randomClientID()
	}
	var expires time.Time
	if c.s.cfg.Insecure {
		c.all = true
		c.user = cc.Username
	} else {
		if !cc.PasswordFlag || len(cc.Password) == 0 {
			return refuse(packets.ErrRefusedNotAuthorised, "denied", "no token: the password must be an xrealm token")
		}
		cl, err := c.s.cfg.Verifier.Verify(string(cc.Password))
		if err != nil {
			return refuse(packets.ErrRefusedNotAuthorised, "denied", err.Error())
		}
		if cc.Username != cl.Subject {
			return refuse(packets.ErrRefusedBadUsernameOrPassword, "denied", "user name "+quote(cc.Username)+" does not match the token's sub "+quote(cl.Subject))
		}
		c.user, c.rights, expires = cl.Subject, cl.Rights(), cl.ExpiresAt.Time
		if auth.IsAnonymous(c.user) {
			sum := sha256.Sum256(cc.Password)
			c.anonToken = string(sum[:])
		}
	}
	c.subs = map[string]byte{}
	c.pubOK = map[string]bool{}
	if cc.WillFlag {
		if strings.HasPrefix(cc.WillTopic, "$") {
			// Dropped, as a PUBLISH on such a topic is (publish): clients
			// must not reach NATS's own $ subjects, whatever their rights.
			c.s.denials.Deny(c.log, "last will ignored: topics starting with '$' are not published", "client", c.clientID, "user", c.user, "topic", topic.Clip(cc.WillTopic))
		} else if err := topic.ValidName(cc.WillTopic); err != nil || !c.mayPublish(cc.WillTopic, cc.WillMessage) {
			c.s.denials.Deny(c.log, "last will ignored: not allowed on its topic", "client", c.clientID, "user", c.user, "topic", topic.Clip(cc.WillTopic))
		} else {
			c.will = &packets.PublishPacket{TopicName: cc.WillTopic, Payload: cc.WillMessage}
			c.will.Qos = min(cc.WillQos, 1)
		}
	}
	c.log = c.log.With("client", c.clientID, "user", c.user)
	c.w = fanout.NewWriter(c.nc, c.s.cfg.Writer, func(err error) { c.close("write failed: " + err.Error()) })
	if !c.s.register(c) {
		c.w.Close() // its writer goroutine, never used
		return refuse(packets.ErrRefusedServerUnavailable, "unavailable", "server shutting down")
	}
	if !expires.IsZero() {
		t := time.AfterFunc(time.Until(expires), func() { c.close("token expired") })
		go func() { <-c.w.Done(); t.Stop() }()
	}
	m.Connects.WithLabelValues("accepted").Inc()
	c.send(&packets.ConnackPacket{FixedHeader: packets.FixedHeader{MessageType: packets.Connack}, ReturnCode: packets.Accepted})
	c.log.Info("MQTT client connected", "keepalive", cc.Keepalive, "clean", cc.CleanSession)
	return time.Duration(cc.Keepalive) * time.Second, true
}

func quote(s string) string { return "\"" + s + "\"" }

// cleanup runs when the read loop ends.
func (c *conn) cleanup() {
	for f := range c.subs {
		c.s.hub.remove(c, f)
	}
	c.s.unregister(c)
	c.s.hub.leave(c.observer())
	if c.will != nil && !c.graceful {
		c.route(newOutMsg(c.will.TopicName, c.will.Payload), 0)
	}
	c.close("connection ended")
	c.w.Close()
}

// send queues a control packet; acknowledgements do not wait, and are not
// dropped when the queue is full (fanout.Frame.Keep).
func (c *conn) send(cp packets.ControlPacket) {
	c.w.Enqueue(&fanout.Frame{Bytes: encode(cp), Urgent: true, Keep: true})
}

// ack acknowledges a PUBLISH received at qos with packet id id: PUBACK at
// QoS 1, PUBREC at QoS 2, nothing at QoS 0.
func (c *conn) ack(qos byte, id uint16) {
	switch qos {
	case 1:
		c.send(&packets.PubackPacket{FixedHeader: packets.FixedHeader{MessageType: packets.Puback}, MessageID: id})
	case 2:
		c.send(&packets.PubrecPacket{FixedHeader: packets.FixedHeader{MessageType: packets.Pubrec}, MessageID: id})
	}
}

// maxLoggedTopic is how much of a refused topic a log line quotes.
const maxLoggedTopic = 200

// deny logs a refused action (at a bounded rate for the whole front end)
// and counts it.
func (c *conn) deny(action, what, why string) {
	if len(what) > maxLoggedTopic {
		// A topic can be as long as a packet; a log line need not.
		what = strings.ToValidUTF8(what[:maxLoggedTopic], "") + "..."
	}
	c.s.m.AuthDenials.WithLabelValues(action).Inc()
	c.denies++
	c.s.denials.Deny(c.log, "MQTT "+action+" denied", "topic", what, "reason", why, "denied_so_far", c.denies)
}

// mayPublish checks the connection's rights for a PUBLISH.
func (c *conn) mayPublish(name string, payload []byte) bool {
	if c.all {
		return true
	}
	ok, cached := c.pubOK[name]
	if !cached {
		ok = c.rights.CanPublish(name)
		if len(c.pubOK) > 1024 {
			clear(c.pubOK)
		}
		c.pubOK[name] = ok
	}
	if ok {
		return true
	}
	return c.rights.EventOnly(name) && auth.IsClientEvent(payload)
}

// publish handles a PUBLISH from the client. frame, if not nil, is the
// message encoded as the QoS 0 PUBLISH that subscribers get, with
// p.Payload a part of it (reader.readPublish).
func (c *conn) publish(p *packets.PublishPacket, frame []byte) {
	c.s.m.MessagesIn.Inc()
	ack := func() { c.ack(p.Qos, p.MessageID) }
	if strings.HasPrefix(p.TopicName, "$") {
		// System topics such as arena-py's $NETWORK/latency are accepted
		// and dropped: clients must not reach NATS's own $ subjects.
		ack()
		return
	}
	if err := topic.ValidName(p.TopicName); err != nil {
		c.deny("publish", p.TopicName, err.Error())
		ack()
		return
	}
	if !c.mayPublish(p.TopicName, p.Payload) {
		why := "no publ right matches the topic"
		if c.rights.EventOnly(p.TopicName) {
			why = "only clientEvent messages are allowed on this topic"
		}
		// MQTT 3.1.1 has no negative acknowledgement: the message is
		// dropped, acknowledged, and logged.
		c.deny("publish", p.TopicName, why)
		ack()
		return
	}
	c.noteSelf(p.TopicName)
	m := newOutMsg(p.TopicName, p.Payload)
	m.frame = frame
	if m.key == "" { // not a pose: the client is interacting
		c.actedAt.Store(c.s.hub.now())
	}
	if c.route(m, p.Qos) {
		ack()
	}
}

// observer returns the id under which interest policies know this client:
// the userClient of its own user (pose) messages, "" before it sent one.
func (c *conn) observer() string {
	if p := c.self.Load(); p != nil {
		return *p
	}
	return ""
}

// noteSelf records the userClient of the client's own user messages.
func (c *conn) noteSelf(name string) {
	if c.self.Load() != nil {
		return
	}
	if t, err := topic.ParseScene(name); err == nil && t.MsgType == topic.MsgUser {
		uc := t.UserClient
		c.self.Store(&uc)
	}
}

// route delivers a message to local subscribers and publishes it on the
// bus. For QoS 1 and 2 on a persisted-object topic it waits until
// JetStream has stored the message, and reports false if that failed (the
// client then gets no acknowledgement and will send it again).
func (c *conn) route(m *outMsg, qos byte) bool {
	name, payload := m.topic, m.payload
	subj := topic.ToSubject(name)
	object := isObjectSubject(subj, c.s.cfg.Realm)
	ignored := object && persist.Ignored(payload)
	if object && !ignored {
		// The persistence stream would keep such a message and never apply
		// it: refuse it as a whole, before it is acknowledged, so that no
		// subscriber sees an object that does not exist.
		err := storableScene(name)
		if err == nil {
			err = persist.CheckUTF8(payload)
		}
		if err == nil {
			err = persist.CheckObjectKey(name)
		}
		if err != nil {
			c.deny("publish", name, err.Error())
			return true
		}
	}
	c.s.hub.publishLocal(m)
	if ignored {
		// A click or a transient update: every subscriber gets it, the
		// persistence stream does not store it, and QoS 1 need not wait.
		m := &nats.Msg{Subject: subj, Data: payload, Header: nats.Header{}}
		persist.SkipStream(m.Header)
		if err := c.s.cfg.NC.PublishMsg(m); err != nil {
			c.log.Error("bus publish failed", "topic", name, "err", err)
		}
		return true
	}
	if qos > 0 && c.s.cfg.JS != nil && object {
		if err := c.publishDurable(subj, payload); err != nil {
			// Without an acknowledgement the client resends only after it
			// reconnects, so make it reconnect.
			c.log.Error("durable publish failed; closing the connection so that the client resends", "topic", name, "err", err)
			c.close("durable publish failed")
			return false
		}
		c.s.m.PersistAcked.Inc()
		return true
	}
	if err := c.s.cfg.NC.Publish(subj, payload); err != nil {
		c.log.Error("bus publish failed", "topic", name, "err", err)
	}
	return true
}

// storableScene reports why the object message on name could not be
// stored: its namespace or scene is not a name that the scene store and
// GET /persist accept (topic.ValidSceneName). name is a scene topic.
func storableScene(name string) error {
	t, err := topic.ParseScene(name)
	if err != nil {
		return err
	}
	if err := topic.ValidSceneName("namespace", t.Namespace); err != nil {
		return fmt.Errorf("a persisted object needs a scene that can be stored: %w", err)
	}
	if err := topic.ValidSceneName("scene", t.Scene); err != nil {
		return fmt.Errorf("a persisted object needs a scene that can be stored: %w", err)
	}
	return nil
}

// publishDurable publishes through JetStream until the stream stores the
// message, retrying through a stream leader election (in a cluster, after
// a node died) for up to durableTimeout. The connection's reader waits
// meanwhile, which keeps this client's messages in order.
func (c *conn) publishDurable(subj string, payload []byte) error {
	deadline := time.Now().Add(durableTimeout)
	delay := 100 * time.Millisecond
	for attempt := 1; ; attempt++ {
		ctx, cancel := context.WithTimeout(context.Background(), min(5*time.Second, time.Until(deadline)))
		_, err := c.s.cfg.JS.Publish(ctx, subj, payload)
		cancel()
		if err == nil {
			return nil
		}
		if time.Now().Add(delay).After(deadline) {
			return fmt.Errorf("after %d attempts: %w", attempt, err)
		}
		if attempt == 1 {
			c.log.Warn("durable publish not stored yet; retrying", "subject", subj, "err", err)
		}
		time.Sleep(delay)
		delay = min(2*delay, time.Second)
	}
}

// isObjectSubject reports whether subj is a non-private object message,
// {realm}.s.{ns}.{scene}.o.{userClient}.{id} of the given realm: the
// subjects the persistence stream stores.
func isObjectSubject(subj, realm string) bool {
	var tok [8]string
	n := 0
	for n < 8 {
		i := strings.IndexByte(subj, '.')
		if i < 0 {
			tok[n] = subj
			n++
			break
		}
		tok[n] = subj[:i]
		subj = subj[i+1:]
		n++
		if n == 8 {
			return false
		}
	}
	return n == 7 && tok[0] == realm && tok[1] == "s" && tok[4] == "o"
}

// MaxSubscriptions is the most topic filters one connection may be
// subscribed to at once; a SUBSCRIBE to one more is refused (SUBACK 0x80)
// until the client unsubscribes from another. Every filter is a group
// that each message of its scene is matched against, on the node's
// dispatch path that all the scene's subscribers share: without a bound,
// one client (any viewer) could subscribe to a million filters its rights
// cover and slow the scene down for everyone. ARENA's clients use a few.
const MaxSubscriptions = 1024

func hasKey[V any](m map[string]V, k string) bool {
	_, ok := m[k]
	return ok
}

func (c *conn) subscribe(p *packets.SubscribePacket) {
	codes := make([]byte, len(p.Topics))
	for i, f := range p.Topics {
		q := byte(0)
		if i < len(p.Qoss) {
			q = min(p.Qoss[i], 1)
		}
		switch err := topic.ValidFilter(f); {
		case err != nil:
			c.deny("subscribe", f, err.Error())
			codes[i] = 0x80
		case !c.all && !c.rights.CanSubscribe(f):
			c.deny("subscribe", f, "no subs right covers the filter")
			codes[i] = 0x80
		case len(c.subs) >= MaxSubscriptions && !hasKey(c.subs, f):
			c.deny("subscribe", f, fmt.Sprintf("the connection has %d subscriptions, the most it may have", len(c.subs)))
			codes[i] = 0x80
		default:
			if err := c.s.hub.add(c, f, q); err != nil {
				c.log.Error("subscribe failed", "filter", f, "err", err)
				codes[i] = 0x80
				continue
			}
			c.subs[f] = q
			codes[i] = q
		}
	}
	c.send(&packets.SubackPacket{FixedHeader: packets.FixedHeader{MessageType: packets.Suback}, MessageID: p.MessageID, ReturnCodes: codes})
}

// deliver queues a message for this connection at qos. It reports whether
// the message was queued.
func (c *conn) deliver(m *outMsg, qos byte, watcher bool) bool {
	var f *fanout.Frame
	if qos == 0 {
		f = m.frameQoS0(watcher)
	} else {
		id := uint16(c.nextID.Add(1))
		if id == 0 {
			id = uint16(c.nextID.Add(1))
		}
		f = &fanout.Frame{Bytes: encodePublish(m.topic, m.payload, 1, id), Urgent: true}
	}
	if c.w.Enqueue(f) != fanout.Dropped { // queued, or coalesced (counted by the writer's OnCoalesce)
		return true
	}
	c.s.m.Dropped.Inc()
	return false
}

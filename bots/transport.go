package bots

import (
	"context"
	"fmt"
	"net"
	"time"
)

// Identity names a bot.
type Identity struct {
	Index      int
	Realm      string
	Namespace  string
	Scene      string
	User       string // user name asked for
	UserClient string // ARENA userClient: the client's id within the scene
	ObjectID   string // its camera's object id
}

// SceneBase returns {realm}/s/{ns}/{scene}.
func (id Identity) SceneBase() string {
	return id.Realm + "/s/" + id.Namespace + "/" + id.Scene
}

// Received is one message a bot got. It is valid only during the
// callback: transports reuse it.
type Received struct {
	From      []byte // sender: its object id over MQTT, its 8-byte network object id over Ubiq
	SentNanos int64  // 0: the message carried no timestamp
	RecvNanos int64
	Size      int // payload bytes
	Pos       Vec3
	HasPos    bool // decoded only when asked for
	// RoundTrip: SentNanos to RecvNanos is a ping's round trip to another
	// peer and back (an echo, not a pose): it is timed apart from the
	// one-way latencies and not counted as a delivery.
	RoundTrip bool
}

// Transport connects bots to a server with some protocol.
type Transport interface {
	// Join connects one bot and subscribes it to its scene as a browser
	// would. rx gets what the connection receives, on the transport's
	// read goroutine; decodePos asks the transport to decode positions.
	Join(ctx context.Context, id Identity, rx Receiver, decodePos bool) (Link, error)
}

// Receiver takes what a bot's connection receives, on the transport's
// read goroutine.
type Receiver interface {
	// Receive is called for every message.
	Receive(*Received)
	// ReadDone is called after the messages of one read (or one frame,
	// where the transport does not see reads) went to Receive: what the
	// receiver keeps for itself meanwhile may be published now.
	ReadDone()
}

// Link is one bot's connection.
type Link interface {
	// SendPose sends the bot's pose stamped with sentNanos.
	SendPose(p Pose, sentNanos int64) error
	// Close disconnects.
	Close() error
	// Done is closed when the connection ends.
	Done() <-chan struct{}
}

// MQTTTransport carries ARENA pose messages over MQTT, as ARENA's browser
// client does: it publishes its camera on
// {realm}/s/{ns}/{scene}/u/{userClient}/{camera id} and subscribes to
// {realm}/s/{ns}/{scene}/+/+/+.
type MQTTTransport struct {
	Addr        string      // host:port, or ws://host:port/mqtt
	Tokens      TokenSource // nil: connect without credentials
	PayloadSize int         // poses are padded to this many bytes; 0 = 310
	Keepalive   time.Duration
}

// Join connects and subscribes one bot.
func (t *MQTTTransport) Join(ctx context.Context, id Identity, rx Receiver, decodePos bool) (Link, error) {
	user, pass := id.User, ""
	if t.Tokens != nil {
		var err error
		if user, pass, err = t.Tokens.Token(ctx, id); err != nil {
			return nil, fmt.Errorf("bot %d: %w", id.Index, err)
		}
	}
	var r Received // reused: the callback runs on the read goroutine only
	onPub := func(topic, payload []byte, at int64) {
		r = Received{From: ObjectIDOfTopic(topic), RecvNanos: at, Size: len(payload)}
		if decodePos {
			r.SentNanos, r.Pos, r.HasPos = posePositionOf(payload)
		} else {
			r.SentNanos = poseSentNanos(payload)
		}
		rx.Receive(&r)
	}
	c, err := DialMQTT(ctx, MQTTConfig{Addr: t.Addr, ClientID: id.UserClient, Username: user, Password: pass, Keepalive: t.Keepalive, OnPublish: onPub, OnReadEnd: rx.ReadDone})
	if err != nil {
		return nil, fmt.Errorf("bot %d: %w", id.Index, err)
	}
	base := id.SceneBase()
	if err := c.Subscribe(ctx, base+"/+/+/+"); err != nil {
		c.Close()
		return nil, fmt.Errorf("bot %d: %w", id.Index, err)
	}
	size := t.PayloadSize
	if size == 0 {
		size = 310
	}
	return &mqttLink{c: c, topic: base + "/u/" + id.UserClient + "/" + id.ObjectID, objectID: id.ObjectID, size: size}, nil
}

type mqttLink struct {
	c        *MQTTClient
	topic    string
	objectID string
	size     int
	buf      []byte // used by SendPose only, from the bot's sender goroutine
}

func (l *mqttLink) SendPose(p Pose, sentNanos int64) error {
	select {
	case <-l.c.Done(): // ended: no write (and no error built) per pose while a bot is away
		if err := l.c.Err(); err != nil {
			return err
		}
		return net.ErrClosed
	default:
	}
	l.buf = AppendPose(l.buf[:0], l.objectID, p, sentNanos, l.size)
	return l.c.Publish(l.topic, l.buf)
}

func (l *mqttLink) Close() error          { return l.c.Close() }
func (l *mqttLink) Done() <-chan struct{} { return l.c.Done() }

// Err returns why the connection ended, once Done is closed.
func (l *mqttLink) Err() error { return l.c.Err() }

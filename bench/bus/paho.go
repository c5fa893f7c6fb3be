package benchbus

import (
	"context"
	"fmt"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"
	"github.com/xrealm/xrealm/bots"
)

// pahoTransport is a bots.Transport built on the Eclipse Paho Go client
// with its default options, as a typical paho-based generator would be. It
// exists only to compare the generators' CPU per delivery.
type pahoTransport struct {
	addr string
	size int
}

func (t *pahoTransport) Join(ctx context.Context, id bots.Identity, rx bots.Receiver, decodePos bool) (bots.Link, error) {
	o := paho.NewClientOptions().AddBroker("tcp://" + t.addr).SetClientID(id.UserClient).SetUsername(id.User).
		SetCleanSession(true).SetAutoReconnect(false).SetConnectRetry(false).SetKeepAlive(60 * time.Second)
	done := make(chan struct{})
	o.SetConnectionLostHandler(func(paho.Client, error) { close(done) })
	c := paho.NewClient(o)
	if tok := c.Connect(); !tok.WaitTimeout(15*time.Second) || tok.Error() != nil {
		return nil, fmt.Errorf("paho bot %d: connect %s: %v", id.Index, t.addr, tok.Error())
	}
	base := id.SceneBase()
	tok := c.Subscribe(base+"/+/+/+", 0, func(_ paho.Client, m paho.Message) {
		p := m.Payload()
		r := bots.Received{From: bots.ObjectIDOfTopic([]byte(m.Topic())), SentNanos: bots.SentNanos(p), RecvNanos: time.Now().UnixNano(), Size: len(p)}
		if decodePos {
			r.Pos, r.HasPos = bots.PositionOf(p)
		}
		rx.Receive(&r)
		rx.ReadDone()
	})
	if !tok.WaitTimeout(15*time.Second) || tok.Error() != nil {
		c.Disconnect(0)
		return nil, fmt.Errorf("paho bot %d: subscribe: %v", id.Index, tok.Error())
	}
	return &pahoLink{c: c, topic: base + "/u/" + id.UserClient + "/" + id.ObjectID, id: id.ObjectID, size: t.size, done: done}, nil
}

type pahoLink struct {
	c     paho.Client
	topic string
	id    string
	size  int
	done  chan struct{}
}

func (l *pahoLink) SendPose(p bots.Pose, sentNanos int64) error {
	tok := l.c.Publish(l.topic, 0, false, bots.AppendPose(nil, l.id, p, sentNanos, l.size))
	tok.Wait()
	return tok.Error()
}

func (l *pahoLink) Close() error {
	l.c.Disconnect(100)
	return nil
}

func (l *pahoLink) Done() <-chan struct{} { return l.done }

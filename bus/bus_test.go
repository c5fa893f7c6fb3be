package bus

import (
	"context"
	"errors"
	"net"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/xrealm/xrealm/auth"
)

func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

func startBus(t *testing.T) (*Bus, *auth.Keys) {
	t.Helper()
	dir := t.TempDir()
	keys, err := auth.LoadOrCreateKeys(dir)
	if err != nil {
		t.Fatal(err)
	}
	b, err := Start(Config{DataDir: dir, Name: "t", NATSAddr: freeAddr(t), Verifier: keys, MaxPayload: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Shutdown)
	return b, keys
}

func TestInternalAndTokenClients(t *testing.T) {
	b, keys := startBus(t)
	internal, err := b.Connect("svc")
	if err != nil {
		t.Fatal(err)
	}
	defer internal.Close()
	if _, err := b.JetStream(context.Background(), internal); err != nil {
		t.Fatal(err)
	}

	viewer, _ := keys.Issue("vic", auth.SceneRights("realm", "ns", "sc", auth.RoleViewer, ""), time.Hour)
	nc, err := nats.Connect(b.ClientURL(), nats.UserInfo("vic", viewer))
	if err != nil {
		t.Fatalf("viewer connect: %v", err)
	}
	defer nc.Close()
	errs := make(chan error, 10)
	nc.SetErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) { errs <- err })

	// Allowed subscription receives scene traffic.
	sub, err := nc.SubscribeSync("realm.s.ns.sc.>")
	if err != nil {
		t.Fatal(err)
	}
	nc.Flush()
	internal.Publish("realm.s.ns.sc.o.uc.box", []byte(`{}`))
	if _, err := sub.NextMsg(2 * time.Second); err != nil {
		t.Fatalf("viewer did not receive scene message: %v", err)
	}
	// Denied: subscribing elsewhere and publishing an object.
	nc.SubscribeSync("realm.s.ns.other.>")
	nc.Publish("realm.s.ns.sc.o.uc.box", []byte(`{}`))
	nc.Flush()
	deadline := time.After(2 * time.Second)
	var denied int
	for denied < 2 {
		select {
		case err := <-errs:
			if !errors.Is(err, nats.ErrPermissionViolation) {
				t.Fatalf("unexpected async error: %v", err)
			}
			denied++
		case <-deadline:
			t.Fatalf("saw %d permission violations, want 2", denied)
		}
	}
}

func TestRefusedClients(t *testing.T) {
	b, keys := startBus(t)
	expired, _ := keys.Issue("eve", auth.SceneRights("realm", "ns", "sc", auth.RoleEditor, ""), -time.Minute)
	good, _ := keys.Issue("ann", auth.SceneRights("realm", "ns", "sc", auth.RoleEditor, ""), time.Hour)
	for name, opt := range map[string]nats.Option{
		"no token":      nats.Name("x"),
		"expired":       nats.UserInfo("eve", expired),
		"wrong user":    nats.UserInfo("bob", good),
		"garbage token": nats.Token("abc"),
	} {
		nc, err := nats.Connect(b.ClientURL(), opt, nats.NoReconnect())
		if err == nil {
			nc.Close()
			t.Errorf("%s: connected, want refused", name)
		}
	}
}

func TestTokenExpiryClosesConnection(t *testing.T) {
	b, keys := startBus(t)
	short, _ := keys.Issue("sam", auth.SceneRights("realm", "ns", "sc", auth.RoleEditor, ""), 1500*time.Millisecond)
	closed := make(chan struct{})
	nc, err := nats.Connect(b.ClientURL(), nats.UserInfo("sam", short), nats.NoReconnect(),
		nats.ClosedHandler(func(*nats.Conn) { close(closed) }))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	select {
	case <-closed:
	case <-time.After(10 * time.Second):
		t.Fatal("connection with an expired token stayed open")
	}
}

// An SFU node joining over NATS with a service token may use sfu.> and
// request/reply, and nothing else.
func TestServiceToken(t *testing.T) {
	b, keys := startBus(t)
	internal, _ := b.Connect("svc")
	defer internal.Close()
	internal.Subscribe("sfu.manager.join", func(m *nats.Msg) { m.Respond([]byte("ok")) })
	internal.Flush()
	tok, _ := keys.Issue("sfu-2", auth.ServiceRights("sfu"), time.Hour)
	nc, err := nats.Connect(b.ClientURL(), nats.Token(tok))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	if m, err := nc.Request("sfu.manager.join", nil, 2*time.Second); err != nil || string(m.Data) != "ok" {
		t.Fatalf("request on sfu.>: %v", err)
	}
	// It answers requests addressed to it, through the requester's inbox.
	nc.Subscribe("sfu.node.2.link", func(m *nats.Msg) { m.Respond([]byte("linked")) })
	nc.Flush()
	if m, err := internal.Request("sfu.node.2.link", nil, 2*time.Second); err != nil || string(m.Data) != "linked" {
		t.Fatalf("reply from the service: %v", err)
	}
	errs := make(chan error, 1)
	nc.SetErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) { errs <- err })
	nc.Publish("realm.s.ns.sc.o.uc.box", []byte("{}"))
	nc.Flush()
	select {
	case err := <-errs:
		if !errors.Is(err, nats.ErrPermissionViolation) {
			t.Fatalf("unexpected error %v", err)
		}
	case <-time.After(2 * time.Second):
		t.Fatal("service token could publish to a scene")
	}
}

package mqtt

import (
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/xrealm/xrealm/bus"
	"github.com/xrealm/xrealm/interest"
)

func TestPassDeliversToInteractingClientsFirst(t *testing.T) {
	const scene = "realm/s/ns/lobby/#"
	conns := make([]*conn, 6)
	for i := range conns {
		conns[i] = &conn{clientID: string(rune('a' + i))}
	}
	// c and e clicked recently, a long ago; the others only watch.
	conns[0].actedAt.Store(100)
	conns[2].actedAt.Store(5000)
	conns[4].actedAt.Store(9000)
	all := &group{filter: scene}
	for _, c := range conns {
		all.snap = append(all.snap, member{c: c})
	}
	// f also has a second, overlapping subscription: one copy only.
	objects := &group{filter: "realm/s/ns/lobby/o/#", snap: []member{{c: conns[5]}, {c: conns[2]}}}
	groups := []*group{all, objects}

	for _, tc := range []struct {
		name   string
		topic  string
		urgent bool
		want   string
	}{
		{"urgent: interacting clients first", "realm/s/ns/lobby/o/cube", true, "ceabdf"},
		{"pose: subscription order", "realm/s/ns/lobby/u/bob_1/head", false, "abcdef"},
		{"other scene: nobody", "realm/s/ns/hall/o/cube", true, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got []string
			p := pass{m: newOutMsg(tc.topic, nil), seq: uint64(len(tc.name)), urgent: tc.urgent,
				to: func(mb member) bool { got = append(got, mb.c.clientID); return true }}
			if tc.urgent {
				p.run(groups, 1000) // acted after 1000: c and e
			}
			p.run(groups, 0)
			if s := strings.Join(got, ""); s != tc.want {
				t.Errorf("delivered to %q, want %q", s, tc.want)
			}
			if p.n != len(tc.want) {
				t.Errorf("n = %d, want %d", p.n, len(tc.want))
			}
		})
	}
}

// A scene's NATS subscription delivers only once the scene's interest
// policy is in place. Getting the policy reads the scene's settings, which
// takes a while; a message that arrived meanwhile (from another node, or
// a NATS client) was dispatched on the subscription's goroutine, which
// read sceneSub.policy while add was about to write it: a data race on an
// interface value, which -race reports.
// startHub starts a bus and a hub on a connection to it, as a front end's
// (echo off).
func startHub(t *testing.T, name string) (*bus.Bus, *nats.Conn, *Hub) {
	t.Helper()
	b, err := bus.Start(bus.Config{DataDir: t.TempDir(), Name: name, Insecure: true, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Shutdown)
	front, err := b.Connect("front", nats.NoEcho())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(front.Close)
	return b, front, NewHub(front, slog.New(slog.DiscardHandler), nil)
}

func TestHubSetsInterestBeforeSubscribing(t *testing.T) {
	b, front, h := startHub(t, "hub-interest")
	other, err := b.Connect("other")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(other.Close)
	h.interestFor = func(ns, scene string) (interest.Policy, time.Duration) {
		if n := front.NumSubscriptions(); n != 0 {
			t.Errorf("the scene's NATS subscription was made before its interest policy (%d subscriptions)", n)
			// A pose arrives meanwhile, as from another node.
			if err := other.Publish("realm.s.ns.lobby.u.bob.head", []byte(`{"data":{"position":{"x":1,"y":0,"z":0}}}`)); err != nil {
				t.Fatal(err)
			}
			for deadline := time.Now().Add(10 * time.Second); h.seq.Load() == 0 && time.Now().Before(deadline); {
				time.Sleep(time.Millisecond)
			}
		}
		return interest.NewKNNPolicy(interest.KNNConfig{}), time.Hour
	}
	c := &conn{}
	const filter = "realm/s/ns/lobby/#"
	if err := h.add(c, filter, 0); err != nil {
		t.Fatal(err)
	}
	if h.Scenes() != 1 {
		t.Fatalf("%d scene subscriptions, want 1", h.Scenes())
	}
	h.remove(c, filter)
	if h.Scenes() != 0 {
		t.Fatalf("%d scene subscriptions after the last filter went, want 0", h.Scenes())
	}
}

// Getting a scene's interest policy reads its settings, which may wait on
// the store; meanwhile subscribes to other scenes, and disconnects, go on.
func TestHubSlowSettingsDoNotBlockOtherScenes(t *testing.T) {
	_, _, h := startHub(t, "hub-slow")
	release, asked := make(chan struct{}), make(chan struct{})
	h.interestFor = func(ns, scene string) (interest.Policy, time.Duration) {
		if scene == "slow" {
			close(asked)
			<-release
		}
		return nil, 0
	}
	slow := make(chan error, 1)
	go func() { slow <- h.add(&conn{}, "realm/s/ns/slow/#", 0) }()
	<-asked
	done := make(chan struct{})
	go func() {
		defer close(done)
		c := &conn{}
		if err := h.add(c, "realm/s/ns/fast/#", 0); err != nil {
			t.Error(err)
		}
		h.remove(c, "realm/s/ns/fast/#")
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		close(release)
		t.Fatal("a subscribe to another scene waited for the slow scene's settings")
	}
	close(release)
	if err := <-slow; err != nil {
		t.Fatal(err)
	}
	if h.Scenes() != 1 {
		t.Fatalf("%d scene subscriptions, want the slow scene's", h.Scenes())
	}
}

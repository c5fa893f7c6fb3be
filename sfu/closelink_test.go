package sfu

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/pion/webrtc/v4"

	"github.com/xrealm/xrealm/sfu/relay"
)

// TestRelayOfferWhileClosing: a relay offer that node 2 handles while it
// closes (its subscription's handler runs on after Close unsubscribed it)
// is refused with an error that says so, and leaves node 2 no link. Before,
// node 2 answered it and kept the link in the map Close had already
// emptied: its PeerConnection stayed open after Close, for as long as the
// offering node kept it.
func TestRelayOfferWhileClosing(t *testing.T) {
	c := startCluster(t, "a", "b")
	n1, n2 := c.nodes[0], c.nodes[1]
	l, offer, err := relay.Dial(n1.api, webrtc.Configuration{}, n2.ID(), (*relayHandler)(n1), 0)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	n2.Close()
	// node 2's handler, on a subject of the test's own: its own
	// subscription is gone
	nc := c.conn(t, "offerer")
	sub, err := nc.Subscribe("test.relay", n2.handleRelayOffer)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	b, _ := json.Marshal(LinkOffer{From: n1.ID(), SDP: offer})
	m, err := nc.Request("test.relay", b, 20*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var ans LinkOffer
	if err := json.Unmarshal(m.Data, &ans); err != nil {
		t.Fatal(err)
	}
	if ans.Error == "" || !strings.Contains(ans.Error, "shutting down") || ans.SDP != "" {
		t.Errorf("closed node 2 answered a relay offer with %+v, want an error that it is shutting down", ans)
	}
	n2.mu.Lock()
	links := len(n2.links)
	n2.mu.Unlock()
	if links != 0 {
		t.Fatalf("closed node 2 holds %d relay links", links)
	}
}

package sfu

import (
	"context"
	"testing"
	"time"

	"github.com/xrealm/xrealm/sfu/relay"
)

// TestOldLinkCloseKeepsReplacement: node 1 replaces its relay link to
// node 2 (it dials again; node 2 takes the new link for the old one), bob
// on node 1 asks for alice's track from node 2 over the new link, and then
// the old link's close is handled, on both nodes. Bob's relayed source and
// node 2's relay of alice to node 1 stay. It fails if a closing link
// takes every relayed source from its peer node and every relay to it,
// those the new link set up too: bob's slot would be emptied and node 2
// would stop relaying alice, so bob would receive nothing of her until the
// source stalled and asked again (3 s).
func TestOldLinkCloseKeepsReplacement(t *testing.T) {
	c := startCluster(t, "a", "b")
	n1, n2 := c.nodes[0], c.nodes[1]
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	rcv := relayedPair(t, ctx, c)
	key := "s1/alice/pc0"
	linkOf := func(n *Node, peer string) *relay.Link {
		n.mu.Lock()
		ls := n.links[peer]
		n.mu.Unlock()
		if ls == nil {
			t.Fatalf("node %s has no link to node %s", n.ID(), peer)
		}
		<-ls.done
		return ls.link
	}
	old1, old2 := linkOf(n1, "2"), linkOf(n2, "1")
	// the replacement: node 1 dials again
	n1.mu.Lock()
	ls := n1.links["2"]
	n1.mu.Unlock()
	n1.dropLink("2", ls)
	l2, err := n1.link("2")
	if err != nil {
		t.Fatal(err)
	}
	// bob's track asked for over the new link (as a stalled source does)
	n1.sendControl("2", relay.Control{Op: "sub", Track: key})
	waitFor(t, "node 2 to relay alice on the new link", func() bool { return relaysOn(n2, key, "1") == linkOf(n2, "1") })
	before := rcv.count(7)
	waitFor(t, "bob to receive alice over the new link", func() bool { return rcv.count(7) >= before+3 })
	n1.mu.Lock()
	src := n1.relayed[key]
	n1.mu.Unlock()
	if src == nil || l2 == old1 {
		t.Fatalf("node 1: relayed source %v, new link is the old one: %v", src, l2 == old1)
	}
	// the old link's close, handled on each node now (its handler runs
	// when the link's connection has closed, which may be this late)
	(*relayHandler)(n1).OnClose(old1)
	(*relayHandler)(n2).OnClose(old2)
	n1.mu.Lock()
	after := n1.relayed[key]
	n1.mu.Unlock()
	if after != src {
		t.Errorf("node 1: the old link's close removed alice's relayed source, which the new link feeds")
	}
	if l := relaysOn(n2, key, "1"); l != linkOf(n2, "1") {
		t.Errorf("node 2: the old link's close removed the relay of alice to node 1 on the new link (now on %p)", l)
	}
}

// relaysOn is the link on which n relays its local track key to node peer,
// nil if it does not.
func relaysOn(n *Node, key, peer string) *relay.Link {
	n.mu.Lock()
	s := n.local[key]
	n.mu.Unlock()
	if s == nil {
		return nil
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	if r, ok := s.relays[peer]; ok {
		return r.link
	}
	return nil
}

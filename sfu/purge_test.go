package sfu

import (
	"context"
	"testing"
	"time"
)

// TestPurgedRelayedSourceReleased: node 1 purges node 2 (its heartbeats
// stopped for a moment) while bob, on node 1, receives alice's point cloud
// relayed from node 2, and alice's track is back in node 1's directory
// (the sync that follows) before bob's allocation runs. Bob receives
// alice again. It fails if the purge drops the relayed source from the
// node but leaves it in bob's slot: his next allocation then finds the
// slot already carrying alice's key and keeps it, on a source nothing
// feeds any more (the link it came over was closed), so bob receives
// nothing of alice for good (and TestLostNodeBack, under load, fails so
// too).
func TestPurgedRelayedSourceReleased(t *testing.T) {
	c := startCluster(t, "a", "b")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	rcv := relayedPair(t, ctx, c)
	n1 := c.nodes[0]
	key := "s1/alice/pc0"
	n1.mu.Lock()
	entry := n1.directory[key]
	n1.purgeNode("2", "test") // unlocks n1.mu
	n1.mu.Lock()
	n1.directory[key] = entry // back, by the sync, before bob's allocation
	n1.mu.Unlock()
	before := rcv.count(7)
	p := n1.peerOf("s1", "bob")
	waitForExplained(t, "bob to receive alice again", func() bool { return rcv.count(7) >= before+3 }, func() string { return p.explain(n1) })
}

// relayedPair dials alice on node 2 (site b), publishing point-cloud frames
// of seed 7 on pc0 until ctx ends, and bob on node 1 (site a) with one video
// slot, and waits until bob receives alice through the relay link. It
// returns bob's receiver.
func relayedPair(t *testing.T, ctx context.Context, c *cluster) *receiver {
	t.Helper()
	alice, err := Dial(ctx, ClientConfig{NC: c.conn(t, "alice"), Session: "s1", Client: "alice", Site: "b", ICEAddresses: loopback,
		Publish: []PublishTrack{{ID: "pc0", Mime: MimeTypePointCloud}}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { alice.Close() })
	go publishFrames(ctx, alice.Tracks["pc0"], 7, 0, 2000)
	rcv := newReceiver()
	bob, err := Dial(ctx, ClientConfig{NC: c.conn(t, "bob"), Session: "s1", Client: "bob", Site: "a", ICEAddresses: loopback,
		VideoSlots: 1, OnTrack: rcv.onTrack})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { bob.Close() })
	if alice.Node != "2" || bob.Node != "1" {
		t.Fatalf("alice on node %s, bob on node %s; want 2 and 1", alice.Node, bob.Node)
	}
	waitFor(t, "bob to receive alice through the relay link", func() bool { return rcv.count(7) >= 3 })
	return rcv
}

package sfu

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
)

// slotWatch records, from a client's slot events, which publisher each of
// its slots carries.
type slotWatch struct {
	mu      sync.Mutex
	carried map[string]string // mid → publishing client
}

func (w *slotWatch) onEvent(e Event) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, s := range e.Slots {
		if s.Track != nil {
			w.carried[s.Mid] = s.Track.Client
		} else {
			delete(w.carried, s.Mid)
		}
	}
}

// clients returns the publishers the slots carry, sorted.
func (w *slotWatch) clients() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Sorted(maps.Values(w.carried))
}

// tracksOf returns the keys of node n's directory entries whose track is
// published on node origin.
func (n *Node) tracksOf(origin string) []string {
	n.mu.Lock()
	defer n.mu.Unlock()
	var out []string
	for key, t := range n.directory {
		if t.Node == origin {
			out = append(out, key)
		}
	}
	return out
}

// relayedFrom reports whether node n holds a source relayed from origin.
func (n *Node) relayedFrom(origin string) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, s := range n.relayed {
		if s.info.Node == origin {
			return true
		}
	}
	return false
}

// goneSetup starts nodes 1 (site a) and 2 (site b): alice publishes a
// point cloud on node 2, carol one on node 1, and bob, on node 1 with one
// video slot, is given alice's (first by key), and keeps it when carol's
// comes. It returns the cluster, its logs, bob's slots, what bob receives
// (alice is client 7, carol 8) and carol.
func goneSetup(t *testing.T, ctx context.Context) (*cluster, []*logLines, *slotWatch, *receiver, *Client) {
	t.Helper()
	c, logs := startLoggedCluster(t, "a", "b")
	dial := func(client, site string, publish bool, w *slotWatch, rcv *receiver) *Client {
		cfg := ClientConfig{NC: c.conn(t, client), Session: "s1", Client: client, Site: site, ICEAddresses: loopback}
		if publish {
			cfg.Publish = []PublishTrack{{ID: "pc0", Mime: MimeTypePointCloud}}
		} else {
			cfg.VideoSlots, cfg.OnEvent, cfg.OnTrack = 1, w.onEvent, rcv.onTrack
		}
		cl, err := Dial(ctx, cfg)
		if err != nil {
			t.Fatalf("client %s at site %s: %v", client, site, err)
		}
		t.Cleanup(cl.Close)
		return cl
	}
	alice := dial("alice", "b", true, nil, nil)
	if alice.Node != "2" {
		t.Fatalf("alice placed on node %s, want 2", alice.Node)
	}
	go publishFrames(ctx, alice.Tracks["pc0"], 7, 0, 2000)
	waitFor(t, "alice's track in node 1's directory", func() bool { return len(c.nodes[0].tracksOf("2")) == 1 })
	w, rcv := &slotWatch{carried: map[string]string{}}, newReceiver()
	if bob := dial("bob", "a", false, w, rcv); bob.Node != "1" {
		t.Fatalf("bob placed on node %s, want 1", bob.Node)
	}
	waitFor(t, "bob to receive alice through the relay link", func() bool { return rcv.count(7) >= 3 })
	carol := dial("carol", "a", true, nil, nil)
	go publishFrames(ctx, carol.Tracks["pc0"], 8, 0, 2000)
	waitFor(t, "carol's track in node 1's directory", func() bool { return len(c.nodes[0].tracksOf("1")) == 1 })
	if got := w.clients(); !slices.Equal(got, []string{"alice"}) {
		t.Fatalf("bob's one slot carries %v, want [alice]", got)
	}
	return c, logs, w, rcv, carol
}

// TestGoneNodeTracksPurged: node 2, where alice publishes, goes without
// announcing her track's removal. Node 1 removes the track from its
// directory, and bob's one slot goes from alice to carol, within a bound
// (the heartbeat timeout), whether node 2 crashed (its heartbeats stop),
// hangs with its relay link still up, announced its leave but not the
// removal, or restarted. It fails if alice's track stays in node 1's
// directory: bob's slot is then given it again and again, carol never,
// and node 1 sends node 2 "sub" every 3 s.
func TestGoneNodeTracksPurged(t *testing.T) {
	tests := []struct {
		name string
		gone func(t *testing.T, c *cluster)
		why  string // as logged
	}{
		{"killed", func(t *testing.T, c *cluster) {
			// no leave announcement (the bus connection is closed first)
			// and no track removal; its relay link closes
			c.nodes[1].cfg.NC.Close()
			c.nodes[1].Close()
		}, `why="no heartbeat"`},
		{"hung", func(t *testing.T, c *cluster) {
			// its heartbeats stop; node 1 closes the relay link
			c.nodes[1].cfg.NC.Close()
		}, `why="no heartbeat"`},
		{"left", func(t *testing.T, c *cluster) {
			// its leave announcement reaches node 1, its track's removal does not
			n2 := c.nodes[1]
			n2.cfg.NC.Close()
			b, _ := json.Marshal(NodeInfo{ID: n2.ID(), Site: "b", Signal: subjectSignal(n2.ID()), Leaving: true, Instance: n2.instance})
			nc := c.conn(t, "leave")
			if err := nc.Publish(subjectNodes, b); err != nil {
				t.Fatal(err)
			}
		}, "why=left"},
		{"restarted", func(t *testing.T, c *cluster) {
			// a new run of it heartbeats (within the timeout) before the
			// previous run's track is removed
			n2 := c.nodes[1]
			n2.cfg.NC.Close()
			b, _ := json.Marshal(NodeInfo{ID: n2.ID(), Site: "b", Signal: subjectSignal(n2.ID()), Instance: newInstance()})
			nc := c.conn(t, "restart")
			if err := nc.Publish(subjectNodes, b); err != nil {
				t.Fatal(err)
			}
		}, "why=restarted"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
			defer cancel()
			c, logs, w, rcv, _ := goneSetup(t, ctx)
			n1 := c.nodes[0]
			tc.gone(t, c)
			waitForExplained(t, "node 2's track out of node 1's directory", func() bool { return len(n1.tracksOf("2")) == 0 },
				func() string { return fmt.Sprint("node 2's tracks: ", n1.tracksOf("2")) })
			waitForExplained(t, "bob's slot to go to carol", func() bool { return slices.Equal(w.clients(), []string{"carol"}) },
				func() string { return fmt.Sprint("bob's slots carry ", w.clients()) })
			waitFor(t, "bob to receive carol", func() bool { return rcv.count(8) >= 3 })
			if n1.relayedFrom("2") {
				t.Error("node 1 still holds a source relayed from node 2")
			}
			if got := logs[0].count(`msg="sfu node gone; its tracks removed from the directory"`, "node=2", tc.why, "tracks=1"); got != 1 {
				t.Errorf("node 1 logged node 2's purge %d times with %s, want once", got, tc.why)
			}
			if got := n1.purged.Load(); got != 1 {
				t.Errorf("node 1 counted %d purged directory entries, want 1", got)
			}
		})
	}
}

// TestLostNodeBack: a node whose heartbeats node 1 missed for the timeout
// (a bus partition, a paused process) loses its tracks there; when its
// heartbeats come again, node 1 asks every node to announce its tracks,
// and alice's is back in the directory: bob's slot, which carol's took,
// goes to alice when carol leaves.
func TestLostNodeBack(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	c, logs, w, rcv, carol := goneSetup(t, ctx)
	n1 := c.nodes[0]
	// node 1's clock jumps past node 2's timeout: as if its heartbeats
	// had stopped for that long. Node 2's heartbeats go on meanwhile: one
	// that node 1 takes while it expires the node keeps node 2's tracks,
	// as it should, and the jump is tried again. (Node 2's track cannot be
	// checked gone from the directory here: its next heartbeat brings it
	// back at any time.)
	purged := n1.purged.Load()
	waitFor(t, "node 1 to purge node 2's track for want of heartbeats", func() bool {
		n1.expireNodes(time.Now().Add(nodeTTL + time.Second))
		return n1.purged.Load() == purged+1
	})
	if !logs[0].has(`msg="sfu node gone; its tracks removed from the directory"`, "node=2", `why="no heartbeat"`, "tracks=1") {
		t.Errorf("node 1 did not log node 2's purge for want of heartbeats")
	}
	waitFor(t, "node 1 to log that node 2 is back", func() bool {
		return logs[0].has(`msg="sfu node heard again after its heartbeats stopped; asking every node to announce its tracks"`, "node=2")
	})
	waitFor(t, "alice's track back in node 1's directory", func() bool { return len(n1.tracksOf("2")) == 1 })
	waitForExplained(t, "bob's slot to go to carol", func() bool { return slices.Equal(w.clients(), []string{"carol"}) },
		func() string { return fmt.Sprint("bob's slots carry ", w.clients()) })
	carol.Close()
	waitForExplained(t, "bob's slot to carry alice again", func() bool { return slices.Equal(w.clients(), []string{"alice"}) },
		func() string { return fmt.Sprint("bob's slots carry ", w.clients()) })
	before := rcv.count(7)
	waitFor(t, "bob to receive alice again", func() bool { return rcv.count(7) >= before+3 })
}

// TestDroppedSlotTold: node 2, where alice publishes, hangs; node 1 sees
// its relay link close (dropSources frees bob's slot, which carried alice)
// and then purges node 2's tracks, before the reconciles that both start
// run. Nothing refills the slot, and bob is told it is empty. It fails if
// the reconcile, finding nothing to change, sends no event: bob's client
// then believes the slot carries alice, for good.
func TestDroppedSlotTold(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	c, _, w, _, carol := goneSetup(t, ctx)
	n1 := c.nodes[0]
	carol.Close() // no track may take the slot
	waitFor(t, "carol's track out of node 1's directory", func() bool { return len(n1.tracksOf("1")) == 0 })
	if got := w.clients(); !slices.Equal(got, []string{"alice"}) {
		t.Fatalf("bob's one slot carries %v, want [alice]", got)
	}
	c.nodes[1].cfg.NC.Close() // node 2 hangs: it announces nothing more
	var alice *source
	n1.mu.Lock()
	for _, s := range n1.relayed {
		if s.info.Node == "2" {
			alice = s
		}
	}
	n1.mu.Unlock()
	if alice == nil {
		t.Fatal("node 1 holds no source relayed from node 2")
	}
	bob := n1.peerOf("s1", "bob")
	// bob's reconciles wait until both events are handled, as when they
	// run late
	bob.mu.Lock()
	bob.dropLocked([]*source{alice}) // the link's close (OnClose → dropSources)
	n1.expireNodes(time.Now().Add(nodeTTL + time.Second))
	bob.mu.Unlock()
	if got := n1.tracksOf("2"); len(got) != 0 {
		t.Fatalf("node 2's tracks in node 1's directory after its timeout: %v, want none", got)
	}
	go bob.reconcile() // the one dropSources starts
	waitForExplained(t, "bob to be told his slot is empty", func() bool { return len(w.clients()) == 0 },
		func() string { return fmt.Sprint("bob's slots carry ", w.clients()) })
}

// TestHeartbeatDuringExpiry: a heartbeat that node 1 takes while it
// expires the node (between finding it expired and purging it) keeps the
// node, which is then not "heard again": nothing was purged, so no sync is
// asked for. It fails if the record is marked lost before the purge is
// confirmed: such a heartbeat then logs the node back and asks every node
// to announce its tracks.
func TestHeartbeatDuringExpiry(t *testing.T) {
	for _, tc := range []struct {
		name      string
		heartbeat bool // node 9's heartbeat lands inside the expiry
	}{
		{"heartbeat inside the expiry", true},
		{"no heartbeat", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, logs := startLoggedCluster(t, "a")
			n := c.nodes[0]
			beat := func() {
				b, _ := json.Marshal(NodeInfo{ID: "9", Site: "x", Instance: "0123456789abcdef"})
				n.handleNodeInfo(&nats.Msg{Data: b})
			}
			beat()
			if tc.heartbeat {
				n.expiring = func(id string) {
					if id == "9" {
						beat()
					}
				}
			}
			n.expireNodes(time.Now().Add(nodeTTL + time.Second))
			n.mu.Lock()
			h := n.heard["9"]
			lost := h != nil && h.lost
			n.mu.Unlock()
			if lost == tc.heartbeat || h == nil {
				t.Fatalf("node 9's record %+v after the expiry, want lost %v", h, !tc.heartbeat)
			}
			if gone := logs[0].has(`msg="sfu node gone; its tracks removed from the directory"`, "node=9"); gone == tc.heartbeat {
				t.Errorf("node 9 purged: %v, want %v", gone, !tc.heartbeat)
			}
			if !tc.heartbeat {
				beat()
			}
			back := logs[0].has(`msg="sfu node heard again after its heartbeats stopped; asking every node to announce its tracks"`, "node=9")
			if back == tc.heartbeat {
				t.Errorf("node 9 logged heard again: %v, want %v", back, !tc.heartbeat)
			}
		})
	}
}

// A node with the session manager is placeable as soon as Start returns:
// the manager has had its first heartbeat, so a client that joins at once
// (a page opened as the server came up) is not told no node is available.
func TestManagerKnowsNodeWhenStartReturns(t *testing.T) {
	for i := range 5 {
		n := fuzzNode(t)
		if got := n.mgr.Nodes(); !slices.Contains(got, n.ID()) {
			t.Fatalf("start %d: the manager lists %q when Start returns, not node %s", i, got, n.ID())
		}
		if a, _ := n.mgr.assign(JoinRequest{Session: "s", Client: "c", Site: "a"}, time.Now(), nil); a.Node != n.ID() {
			t.Fatalf("start %d: a join at once was placed on %+v, want node %s", i, a, n.ID())
		}
		n.Close()
	}
}

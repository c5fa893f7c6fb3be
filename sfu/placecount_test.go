package sfu

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
)

// nodeSeen returns when mgr last had a heartbeat of node id and the
// clients it counted (zero values when it has none).
func nodeSeen(mgr *Manager, id string) (time.Time, int) {
	mgr.mu.Lock()
	defer mgr.mu.Unlock()
	if ns := mgr.nodes[id]; ns != nil {
		return ns.seen, ns.info.Clients
	}
	return time.Time{}, 0
}

// waitHeartbeats waits until mgr has had n more heartbeats of node id.
func waitHeartbeats(t *testing.T, mgr *Manager, id string, n int) {
	t.Helper()
	for range n {
		last, _ := nodeSeen(mgr, id)
		waitFor(t, "a heartbeat of node "+id, func() bool { seen, _ := nodeSeen(mgr, id); return seen.After(last) })
	}
}

// TestPlacementCountedUntilItsOffer: a client the manager placed on a
// node counts on that node in the manager's view until the node's
// heartbeats count it, also across heartbeats that came before its offer
// (here it sends none): node 1, which takes one client, is full for the
// next client two heartbeats later, so that a burst of joins does not
// overfill it. Once expectGrace has passed without its offer the node no
// longer counts it and takes the next. A client that connects counts
// once.
func TestPlacementCountedUntilItsOffer(t *testing.T) {
	c := startClusterWith(t, func(i int, cfg *Config) {
		if i == 0 {
			cfg.MaxClients = 1
		}
	}, "a", "b")
	mgr := c.nodes[0].mgr
	nc := c.conn(t, "joins")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	join := func(client, site string) string {
		t.Helper()
		a, err := RequestJoin(ctx, nc, JoinRequest{Session: "s1", Client: client, Site: site})
		if err != nil {
			t.Fatalf("join of %s: %v", client, err)
		}
		return a.Node
	}
	// A client that connects counts once, whatever its placement did.
	cl, err := Dial(ctx, ClientConfig{NC: c.conn(t, "u4"), Session: "s1", Client: "u4", Site: "b", ICEAddresses: loopback, VideoSlots: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if cl.Node != "2" {
		t.Fatalf("u4 on node %s, want 2", cl.Node)
	}
	waitHeartbeats(t, mgr, "2", 2)
	if _, clients := nodeSeen(mgr, "2"); clients != 1 {
		t.Fatalf("node 2's heartbeat counts %d clients with u4 connected (its placement and its connection), want 1", clients)
	}

	if node := join("u1", "a"); node != "1" {
		t.Fatalf("u1 placed on node %s, want 1 (its site's, empty)", node)
	}
	waitHeartbeats(t, mgr, "1", 2) // the second one is the node's after the placement
	if _, clients := nodeSeen(mgr, "1"); clients != 1 {
		t.Errorf("node 1's heartbeat counts %d clients, want 1 (u1, placed, its offer not come)", clients)
	}
	if node := join("u2", "a"); node != "2" {
		t.Fatalf("u2 placed on node %s two heartbeats after u1's placement, want 2 (node 1 takes one client: u1)", node)
	}
	waitFor(t, "node 1 to stop counting u1, which never offered", func() bool { _, clients := nodeSeen(mgr, "1"); return clients == 0 })
	if node := join("u3", "a"); node != "1" {
		t.Fatalf("u3 placed on node %s once node 1 no longer counts u1, want 1", node)
	}
}

// TestRejoinAfterDropCounts: a client that joins again, placed on the
// node it had, counts as one more client there when the node no longer
// counted it (it left a while ago): node 1, which takes one client, is
// full for the next client of its site at once, not only once its next
// heartbeat counts the client.
func TestRejoinAfterDropCounts(t *testing.T) {
	c := startClusterWith(t, func(i int, cfg *Config) {
		// long enough that no heartbeat of node 1 comes between the two
		// joins below: it would count tab, and node 1 would be full for
		// other however the manager counted tab's join
		cfg.Heartbeat = 2 * time.Second
		if i == 0 {
			cfg.MaxClients = 1
		}
	}, "a", "b")
	mgr := c.nodes[0].mgr
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cl, err := Dial(ctx, ClientConfig{NC: c.conn(t, "tab"), Session: "s1", Client: "tab", Site: "a", ICEAddresses: loopback, VideoSlots: 1})
	if err != nil {
		t.Fatal(err)
	}
	if cl.Node != "1" {
		t.Fatalf("tab on node %s, want 1", cl.Node)
	}
	waitFor(t, "the manager to have node 1's heartbeat with tab", func() bool { _, clients := nodeSeen(mgr, "1"); return clients == 1 })
	cl.Close()
	waitFor(t, "the manager to have node 1's heartbeat without tab", func() bool { _, clients := nodeSeen(mgr, "1"); return clients == 0 })

	nc := c.conn(t, "joins")
	join := func(client string) string {
		t.Helper()
		a, err := RequestJoin(ctx, nc, JoinRequest{Session: "s1", Client: client, Site: "a"})
		if err != nil {
			t.Fatalf("join of %s: %v", client, err)
		}
		return a.Node
	}
	if node := join("tab"); node != "1" {
		t.Fatalf("tab joining again placed on node %s, want 1 (its node, empty)", node)
	}
	if node := join("other"); node != "2" {
		t.Fatalf("other placed on node %s after tab joined node 1 again, want 2 (node 1 takes one client: tab)", node)
	}
}

// TestFullRefusalCountsFull: a node that refuses a client as full is full
// for the manager until its next heartbeat. Node 1 (site a) takes one
// client and has one the manager did not place (an offer sent to it
// directly, as a client another manager placed would be); its heartbeats
// are held from before that offer until u2 is placed, so that the
// manager's count of node 1 has none. u1 of site a is placed on node 1,
// refused as full, and asks again naming node 1 in JoinRequest.Full: it
// goes to node 2, and so does u2 of site a, placed then.
func TestFullRefusalCountsFull(t *testing.T) {
	c := startClusterWith(t, func(i int, cfg *Config) {
		if i == 0 {
			cfg.MaxClients = 1
		}
	}, "a", "b")
	mgr := c.nodes[0].mgr
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	release := holdHeartbeats(t, mgr, c.nodes[0])
	if rep := c.nodes[0].Signal(Signal{Op: "offer", Session: "s1", Client: "direct", SDP: recvOffer(t, 1)}); rep.Op != "answer" {
		t.Fatalf("direct offer to node 1: %+v, want an answer", rep)
	}
	nc := c.conn(t, "u1")
	var placed []string
	var u2 Assignment
	p := placement{nc: nc, req: JoinRequest{Session: "s1", Client: "u1", Site: "a"}, log: slog.New(slog.DiscardHandler), retryMsg: "retry",
		send: func(ctx context.Context, a Assignment, s Signal) (Reply, error) {
			return requestSignal(ctx, nc, a.Signal, s)
		},
		placed: func(a Assignment) {
			placed = append(placed, a.Node)
			if len(placed) == 2 { // placed by the attempt naming node 1
				var err error
				if u2, err = RequestJoin(ctx, c.conn(t, "u2"), JoinRequest{Session: "s1", Client: "u2", Site: "a"}); err != nil {
					t.Errorf("join of u2: %v", err)
				}
				release()
			}
		}}
	a, _, err := p.run(ctx, Signal{Op: "offer", Session: "s1", Client: "u1", SDP: recvOffer(t, 1)})
	if err != nil || a.Node != "2" || !slices.Equal(placed, []string{"1", "2"}) {
		t.Fatalf("u1 on node %q after placements %v (%v); want node 2 after node 1 refused it as full", a.Node, placed, err)
	}
	if u2.Node != "2" {
		t.Fatalf("u2 placed on node %q after node 1 refused u1 as full, want 2", u2.Node)
	}
}

// placedOn returns the placements mgr counts on node id that its
// heartbeats do not count yet.
func placedOn(mgr *Manager, id string) map[string]uint64 {
	mgr.mu.Lock()
	defer mgr.mu.Unlock()
	if ns := mgr.nodes[id]; ns != nil {
		return maps.Clone(ns.placed)
	}
	return nil
}

// TestPlacementAwaitsItsPing: a placement counts on its node while its
// ping is on its way, whatever heartbeats of the node come meanwhile, and
// then until the heartbeat after the one the node's answer names. Node 9
// (a node of the test's, with numbered heartbeats) holds the ping of
// client c's placement while it sends heartbeats 2 and 3, and answers
// at heartbeat 3: the manager counts c on node 9 until heartbeat 4.
func TestPlacementAwaitsItsPing(t *testing.T) {
	c := startCluster(t, "a")
	mgr := c.nodes[0].mgr
	mgr.probeWait.Store(int64(time.Minute)) // the ping waits for the test's answer, not for probeTimeout
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	nc := c.conn(t, "node9")
	pinged, answer := make(chan struct{}, 1), make(chan uint64)
	if _, err := nc.Subscribe(subjectSignal("9"), func(m *nats.Msg) {
		var s Signal
		if err := json.Unmarshal(m.Data, &s); err != nil || s.Op != "ping" || !s.Place {
			t.Errorf("node 9 got %s (%v), want the ping of a placement", m.Data, err)
			return
		}
		select {
		case pinged <- struct{}{}:
		case <-ctx.Done():
			return
		}
		select {
		case beat := <-answer:
			respondSignal(m, Reply{Op: "ok", Site: "z", Instance: "i", Beat: beat})
		case <-ctx.Done():
		}
	}); err != nil {
		t.Fatal(err)
	}
	heartbeat := func(beat uint64) {
		t.Helper()
		b, _ := json.Marshal(NodeInfo{ID: "9", Site: "z", MaxClients: 10, Signal: subjectSignal("9"), Instance: "i", Beat: beat})
		if err := nc.Publish(subjectNodes, b); err != nil {
			t.Fatal(err)
		}
		waitFor(t, fmt.Sprint("the manager to have heartbeat ", beat, " of node 9"), func() bool {
			mgr.mu.Lock()
			defer mgr.mu.Unlock()
			ns := mgr.nodes["9"]
			return ns != nil && ns.info.Beat == beat
		})
	}
	heartbeat(1)
	joined := make(chan error, 1)
	go func() {
		a, err := RequestJoin(ctx, c.conn(t, "c"), JoinRequest{Session: "s", Client: "c", Site: "z"})
		if err == nil && a.Node != "9" {
			err = fmt.Errorf("placed on node %s, want 9", a.Node)
		}
		joined <- err
	}()
	select {
	case <-pinged:
	case <-ctx.Done():
		t.Fatal("node 9 got no ping")
	}
	heartbeat(2)
	heartbeat(3)
	if placed := placedOn(mgr, "9"); placed["s/c"] != awaitingPing {
		t.Errorf("placements on node 9 after heartbeats 2 and 3, its ping unanswered: %v, want s/c awaiting its ping", placed)
	}
	select {
	case answer <- 3:
	case <-ctx.Done():
		t.Fatal("node 9 did not take its answer")
	}
	if err := <-joined; err != nil {
		t.Fatal(err)
	}
	if placed := placedOn(mgr, "9"); !maps.Equal(placed, map[string]uint64{"s/c": 3}) {
		t.Errorf("placements on node 9 after its answer at heartbeat 3: %v, want s/c until heartbeat 4", placed)
	}
	heartbeat(4)
	if placed := placedOn(mgr, "9"); len(placed) != 0 {
		t.Errorf("placements on node 9 after heartbeat 4: %v, want none (it counts c)", placed)
	}
}

// TestFailedPingForgetsPlacement: a placement whose ping fails without
// the node being taken for gone (the manager closing, or its bus
// connection closed) no longer counts on the node.
func TestFailedPingForgetsPlacement(t *testing.T) {
	c := startCluster(t, "a")
	for _, tc := range []struct {
		name string
		fail func(cancel context.CancelFunc, nc *nats.Conn)
	}{
		{"manager closing", func(cancel context.CancelFunc, _ *nats.Conn) { cancel() }},
		{"bus connection closed", func(_ context.CancelFunc, nc *nats.Conn) { nc.Close() }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			nc := c.conn(t, "manager")
			mgr, err := StartManager(nc, slog.New(slog.DiscardHandler))
			if err != nil {
				t.Fatal(err)
			}
			defer mgr.Close()
			waitFor(t, "the manager to know node 1", func() bool { return len(mgr.Nodes()) == 1 })
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			tc.fail(cancel, nc)
			if a := mgr.place(ctx, JoinRequest{Session: "s", Client: "c", Site: "a"}); a.Error == "" {
				t.Fatalf("placement: %+v, want an error", a)
			}
			if placed := placedOn(mgr, "1"); len(placed) != 0 {
				t.Fatalf("placements on node 1 after the ping failed: %v, want none", placed)
			}
		})
	}
}

// TestLeaveEndsExpectation: a client placed on a node (the manager's ping
// with Place) that leaves before its offer, over the bus or through the
// node's Signal (its WebSocket handler's path), is no longer counted in the
// node's heartbeats: node 1, which takes one client, is not full for a
// client that is not coming.
func TestLeaveEndsExpectation(t *testing.T) {
	c := startClusterWith(t, func(i int, cfg *Config) { cfg.MaxClients = 1 }, "a")
	n1, mgr := c.nodes[0], c.nodes[0].mgr
	nc := c.conn(t, "leaves")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, tc := range []struct {
		name  string
		leave func(s Signal) (Reply, error)
	}{
		{"bus", func(s Signal) (Reply, error) { return requestSignal(ctx, nc, subjectSignal("1"), s) }},
		{"Signal", func(s Signal) (Reply, error) { return n1.Signal(s), nil }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			client := "gone-" + tc.name
			if rep, err := requestSignal(ctx, nc, subjectSignal("1"), Signal{Op: "ping", Session: "s1", Client: client, Place: true}); err != nil || rep.Op != "ok" {
				t.Fatalf("ping of the placement: %+v, %v", rep, err)
			}
			waitFor(t, "node 1's heartbeat to count "+client+", expected", func() bool { _, clients := nodeSeen(mgr, "1"); return clients == 1 })
			if rep, err := tc.leave(Signal{Op: "leave", Session: "s1", Client: client}); err != nil || rep.Op != "ok" {
				t.Fatalf("leave: %+v, %v", rep, err)
			}
			waitHeartbeats(t, mgr, "1", 2) // the second one is the node's after the leave
			if _, clients := nodeSeen(mgr, "1"); clients != 0 {
				t.Fatalf("node 1's heartbeat counts %d clients after %s left, want 0", clients, client)
			}
		})
	}
}

// holdHeartbeats holds node n's heartbeats (its loop waits for hbMu)
// once mgr has n's last one, and returns what ends the hold; the test's
// end ends it too. Until then mgr has no heartbeat of n, so what a join
// does to mgr's count of n stays; a hold has to end within nodeTTL.
func holdHeartbeats(t *testing.T, mgr *Manager, n *Node) (release func()) {
	t.Helper()
	n.hbMu.Lock()
	var once sync.Once
	release = func() { once.Do(n.hbMu.Unlock) }
	t.Cleanup(release)
	n.mu.Lock()
	beat := n.beat
	n.mu.Unlock()
	waitFor(t, fmt.Sprint("the manager to have heartbeat ", beat, " of node ", n.ID()), func() bool {
		mgr.mu.Lock()
		defer mgr.mu.Unlock()
		ns := mgr.nodes[n.ID()]
		return ns != nil && ns.info.Beat == beat
	})
	return release
}

// refusedFull reports whether mgr counts node id full for a refusal since
// its last heartbeat (nodeState.refused).
func refusedFull(mgr *Manager, id string) bool {
	mgr.mu.Lock()
	defer mgr.mu.Unlock()
	ns := mgr.nodes[id]
	return ns != nil && ns.refused
}

// TestFullRefusalNamedOnce: a placement names a node that refused its
// client as full (JoinRequest.Full) on its next attempt only: a later
// attempt may come after the node's heartbeat, whose count the manager
// then has. Nodes 1 (site a) and 2 (site b) take one client each and have
// one. u1 of site a is placed on node 1, refused, and on node 2 by the
// attempt naming node 1; a heartbeat of node 1 comes, then the heartbeats
// of both nodes are held. Node 2 refuses u1, and the attempt naming it
// finds no node left; the placement asks both again after its backoff.
// When the manager places u1 on node 1 again, node 2 counts as full for
// the refusal, node 1 does not.
func TestFullRefusalNamedOnce(t *testing.T) {
	c := startClusterWith(t, func(_ int, cfg *Config) { cfg.MaxClients = 1 }, "a", "b")
	mgr := c.nodes[0].mgr
	for _, n := range c.nodes {
		if rep := n.Signal(Signal{Op: "offer", Session: "s1", Client: "direct" + n.ID(), SDP: recvOffer(t, 1)}); rep.Op != "answer" {
			t.Fatalf("direct offer to node %s: %+v, want an answer", n.ID(), rep)
		}
		waitFor(t, "the manager to have node "+n.ID()+"'s heartbeat with its client", func() bool { _, clients := nodeSeen(mgr, n.ID()); return clients == 1 })
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	nc := c.conn(t, "u1")
	var (
		placed             []string
		refused1, refused2 bool
	)
	p := placement{nc: nc, req: JoinRequest{Session: "s1", Client: "u1", Site: "a"}, log: slog.New(slog.DiscardHandler), retryMsg: "retry",
		send: func(ctx context.Context, a Assignment, s Signal) (Reply, error) {
			return requestSignal(ctx, nc, a.Signal, s)
		},
		placed: func(a Assignment) {
			placed = append(placed, a.Node)
			switch len(placed) {
			case 2: // placed by the attempt naming node 1
				waitHeartbeats(t, mgr, "1", 1)
				holdHeartbeats(t, mgr, c.nodes[0])
				holdHeartbeats(t, mgr, c.nodes[1])
			case 3: // placed after the attempt naming node 2
				refused1, refused2 = refusedFull(mgr, "1"), refusedFull(mgr, "2")
				cancel() // nothing more to see
			}
		}}
	_, _, err := p.run(ctx, Signal{Op: "offer", Session: "s1", Client: "u1", SDP: recvOffer(t, 1)})
	if !slices.Equal(placed, []string{"1", "2", "1"}) {
		t.Fatalf("u1 placed on %v (%v), want 1, 2 (both refused it as full), then 1 again", placed, err)
	}
	if refused1 || !refused2 {
		t.Errorf("full for a refusal after the attempt naming node 2: node 1 %v, node 2 %v; want node 2 alone (node 1's heartbeat came after its refusal was named)", refused1, refused2)
	}
}

// TestBusyRefusalNotFull: a node that refuses a client because its signal
// slots are all taken (Reply.Busy) is not named full to the manager
// (JoinRequest.Full): that says nothing of its clients. Node 1's slots are
// taken and its heartbeats held; u1 of its site is placed on node 1,
// refused, and on node 2 by the next attempt, after which the manager does
// not count node 1 full.
func TestBusyRefusalNotFull(t *testing.T) {
	c := startCluster(t, "a", "b")
	n1, mgr := c.nodes[0], c.nodes[0].mgr
	for range cap(n1.signalSlots) {
		n1.signalSlots <- struct{}{}
	}
	defer func() {
		for range cap(n1.signalSlots) {
			<-n1.signalSlots
		}
	}()
	holdHeartbeats(t, mgr, n1)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	nc := c.conn(t, "u1")
	var (
		placed   []string
		refused1 bool
	)
	p := placement{nc: nc, req: JoinRequest{Session: "s1", Client: "u1", Site: "a"}, log: slog.New(slog.DiscardHandler), retryMsg: "retry",
		send: func(ctx context.Context, a Assignment, s Signal) (Reply, error) {
			return requestSignal(ctx, nc, a.Signal, s)
		},
		placed: func(a Assignment) {
			placed = append(placed, a.Node)
			if len(placed) == 2 { // placed by the attempt after node 1's refusal
				refused1 = refusedFull(mgr, "1")
				cancel() // nothing more to see
			}
		}}
	_, _, err := p.run(ctx, Signal{Op: "offer", Session: "s1", Client: "u1", SDP: recvOffer(t, 1)})
	if !slices.Equal(placed, []string{"1", "2"}) {
		t.Fatalf("u1 placed on %v (%v), want 1 (busy), then 2", placed, err)
	}
	if refused1 {
		t.Error("node 1 counts as full for the manager after it refused u1 for its signal slots, want not")
	}
}

package sfu

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestSignalsInFlightBounded: while maxSignalsInFlight signals are being
// handled, an offer that comes over the bus is answered at once with an
// error that says the node is busy and gives the bound, and makes no peer;
// a ping is still answered, and so is a leave, which takes effect; once
// the signals are done the same offer is taken. So a flood of offers
// cannot make the node handle any number of signals at once.
func TestSignalsInFlightBounded(t *testing.T) {
	c := startCluster(t, "a")
	n := c.nodes[0]
	nc := c.conn(t, "flood")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// the slots held, as by signals in progress
	for range cap(n.signalSlots) {
		n.signalSlots <- struct{}{}
	}
	offer := Signal{Op: "offer", Session: "s1", Client: "late", SDP: recvOffer(t, 1)}
	rep, err := requestSignal(ctx, nc, subjectSignal(n.ID()), offer)
	if err == nil || !strings.Contains(rep.Error, "busy") || !strings.Contains(rep.Error, fmt.Sprintf("at most %d", maxSignalsInFlight)) {
		t.Fatalf("offer to a busy node: reply %+v, err %v; want an error that it is busy, giving the bound", rep, err)
	}
	t.Logf("error: %s", rep.Error)
	if hasPeer(n, "s1/late") {
		t.Fatal("the refused offer left a peer")
	}
	if rep, err := requestSignal(ctx, nc, subjectSignal(n.ID()), Signal{Op: "ping", Session: "s1", Client: "late"}); err != nil || rep.Op != "ok" {
		t.Fatalf("ping to a busy node: %+v, %v; want ok", rep, err)
	}
	// A leave is never refused: nobody retries one, and the peer would
	// hold its place until ICE gave up.
	if rep := n.Signal(Signal{Op: "offer", Session: "s1", Client: "stays", SDP: recvOffer(t, 1)}); rep.Op != "answer" {
		t.Fatalf("offer straight to the node: %s %s, want an answer", rep.Op, rep.Error)
	}
	if rep, err := requestSignal(ctx, nc, subjectSignal(n.ID()), Signal{Op: "leave", Session: "s1", Client: "stays"}); err != nil || rep.Op != "ok" {
		t.Fatalf("leave to a busy node: %+v, %v; want ok", rep, err)
	}
	waitFor(t, "the peer that left while the node was busy to go", func() bool { return !hasPeer(n, "s1/stays") })
	for range cap(n.signalSlots) {
		<-n.signalSlots
	}
	rep, err = requestSignal(ctx, nc, subjectSignal(n.ID()), offer)
	if err != nil || rep.Op != "answer" {
		t.Fatalf("offer once the node is free: %+v, %v; want an answer", rep, err)
	}
	n.Signal(Signal{Op: "leave", Session: "s1", Client: "late"})
}

// TestClientsPerNodeBounded: a node takes at most Config.MaxClients clients;
// the offer of one more is refused, making no peer, with an error marked
// full and not busy (Reply.Full, Reply.Busy) that names the client and
// gives the bound, and the same offer is taken once a client left.
func TestClientsPerNodeBounded(t *testing.T) {
	const maxClients = 2
	c := startClusterWith(t, func(_ int, cfg *Config) { cfg.MaxClients = maxClients }, "a")
	n := c.nodes[0]
	offer := recvOffer(t, 1)
	for i := range maxClients {
		client := fmt.Sprintf("c%d", i)
		if rep := n.Signal(Signal{Op: "offer", Session: "s1", Client: client, SDP: offer}); rep.Op != "answer" {
			t.Fatalf("client %s: %s %s, want an answer", client, rep.Op, rep.Error)
		}
		defer n.Signal(Signal{Op: "leave", Session: "s1", Client: client})
	}
	rep := n.Signal(Signal{Op: "offer", Session: "s1", Client: "extra", SDP: offer})
	if rep.Op != "error" || !rep.Full || rep.Busy || !strings.Contains(rep.Error, fmt.Sprintf("at most %d", maxClients)) || !strings.Contains(rep.Error, "s1/extra") {
		t.Fatalf("offer beyond the bound: %+v, want an error marked full, not busy, naming the client and the bound", rep)
	}
	t.Logf("error: %s", rep.Error)
	if hasPeer(n, "s1/extra") {
		t.Fatal("the refused client has a peer on the node")
	}
	n.Signal(Signal{Op: "leave", Session: "s1", Client: "c0"})
	waitFor(t, "c0 to leave", func() bool { return !hasPeer(n, "s1/c0") })
	if rep := n.Signal(Signal{Op: "offer", Session: "s1", Client: "extra", SDP: offer}); rep.Op != "answer" {
		t.Fatalf("offer once a client left: %s %s, want an answer", rep.Op, rep.Error)
	}
	n.Signal(Signal{Op: "leave", Session: "s1", Client: "extra"})
}

// TestFullNodeClientPlacedElsewhere: a client the manager places on a node
// that refuses it for its load (here its signal slots, which the manager
// does not know of) is placed on another: Dial places it on node 1, its
// site's, then on node 2, and succeeds there rather than ending with node
// 1's refusal.
func TestFullNodeClientPlacedElsewhere(t *testing.T) {
	c := startCluster(t, "a", "b")
	n1 := c.nodes[0]
	for range cap(n1.signalSlots) {
		n1.signalSlots <- struct{}{}
	}
	defer func() {
		for range cap(n1.signalSlots) {
			<-n1.signalSlots
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var placed []string
	cl, err := Dial(ctx, ClientConfig{NC: c.conn(t, "second"), Session: "s1", Client: "second", Site: "a", ICEAddresses: loopback, VideoSlots: 1,
		placed: func(a Assignment) { placed = append(placed, a.Node) }})
	if err != nil {
		t.Fatalf("client placed on busy node 1 (placements %v): %v", placed, err)
	}
	defer cl.Close()
	if cl.Node != "2" || len(placed) != 2 || placed[0] != "1" {
		t.Fatalf("client on node %s after placements %v; want node 1 (its site's, busy), then 2", cl.Node, placed)
	}
}

// TestManagerSkipsFullNode: a node with Config.MaxClients clients says so
// in its heartbeat (NodeInfo.MaxClients), and the manager places a client
// of its site on another node at once: the client's one placement is on
// node 2, not on the full node 1, which would refuse it and make it ask
// again.
func TestManagerSkipsFullNode(t *testing.T) {
	c := startClusterWith(t, func(i int, cfg *Config) {
		if i == 0 {
			cfg.MaxClients = 1
		}
	}, "a", "b")
	n1 := c.nodes[0]
	if rep := n1.Signal(Signal{Op: "offer", Session: "s1", Client: "first", SDP: recvOffer(t, 1)}); rep.Op != "answer" {
		t.Fatalf("first client: %s %s, want an answer", rep.Op, rep.Error)
	}
	defer n1.Signal(Signal{Op: "leave", Session: "s1", Client: "first"})
	mgr := n1.mgr
	waitFor(t, "the manager to have node 1's heartbeat with its client", func() bool {
		mgr.mu.Lock()
		defer mgr.mu.Unlock()
		ns := mgr.nodes["1"]
		return ns != nil && ns.info.Clients == 1 && ns.info.MaxClients == 1
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var placed []string
	cl, err := Dial(ctx, ClientConfig{NC: c.conn(t, "second"), Session: "s1", Client: "second", Site: "a", ICEAddresses: loopback, VideoSlots: 1,
		placed: func(a Assignment) { placed = append(placed, a.Node) }})
	if err != nil {
		t.Fatalf("client at the site of full node 1 (placements %v): %v", placed, err)
	}
	defer cl.Close()
	if cl.Node != "2" || !slices.Equal(placed, []string{"2"}) {
		t.Fatalf("client on node %s after placements %v; want node 2 at once (node 1 is full)", cl.Node, placed)
	}
}

// TestWebSocketSignalsInFlightBounded: a node's own WebSocket handler
// takes the node's signal slots as the bus's signals do: while they are
// all taken, an offer the handler sends to its own node is refused as full
// and busy (errNodeFull, errNodeBusy; Reply.Full, Reply.Busy) with an
// error giving the bound and the client, and makes no peer; a leave is
// still answered; and a WebSocket client's offer, placed on node 1 first,
// is placed on node 2 and answered there. So a WebSocket client flooding
// offers is bounded as one over the bus is, not by MaxClients alone.
func TestWebSocketSignalsInFlightBounded(t *testing.T) {
	c := startCluster(t, "a", "b")
	n1 := c.nodes[0]
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for range cap(n1.signalSlots) {
		n1.signalSlots <- struct{}{}
	}
	defer func() {
		for range cap(n1.signalSlots) {
			<-n1.signalSlots
		}
	}()
	own := subjectSignal(n1.ID())
	rep, err := n1.signalNode(ctx, own, Signal{Op: "offer", Session: "s1", Client: "direct", SDP: recvOffer(t, 1)})
	if !errors.Is(err, errNodeFull) || !errors.Is(err, errNodeBusy) || !rep.Full || !rep.Busy ||
		!strings.Contains(rep.Error, fmt.Sprintf("at most %d", maxSignalsInFlight)) || !strings.Contains(rep.Error, `"s1"/"direct"`) {
		t.Fatalf("offer of the node's own handler while its slots are taken: %+v, %v; want a full and busy error giving the bound and the client", rep, err)
	}
	if hasPeer(n1, "s1/direct") {
		t.Fatal("the refused offer left a peer")
	}
	if rep, err := n1.signalNode(ctx, own, Signal{Op: "leave", Session: "s1", Client: "direct"}); err != nil || rep.Op != "ok" {
		t.Fatalf("leave of the node's own handler while its slots are taken: %+v, %v; want ok", rep, err)
	}

	var (
		pmu    sync.Mutex
		placed []string
	)
	n1.wsPlaced = func(a Assignment) {
		pmu.Lock()
		placed = append(placed, a.Node)
		pmu.Unlock()
	}
	ws := dialSignalling(t, ctx, n1.Handler(), "a")
	if err := ws.WriteJSON(Signal{Op: "offer", Session: "s1", Client: "ws", SDP: recvOffer(t, 1)}); err != nil {
		t.Fatal(err)
	}
	var got Reply
	if err := ws.ReadJSON(&got); err != nil {
		t.Fatal(err)
	}
	pmu.Lock()
	defer pmu.Unlock()
	if got.Op != "answer" || !slices.Equal(placed, []string{"1", "2"}) {
		t.Fatalf("WebSocket offer while node 1's slots are taken: %s %q, placed on %v; want an answer, placed on node 1 (full) then 2", got.Op, got.Error, placed)
	}
	if hasPeer(n1, "s1/ws") || !hasPeer(c.nodes[1], "s1/ws") {
		t.Fatal("the WebSocket client is not on node 2 alone")
	}
}

// TestSingleNodeBusyRetried: on a cluster of one node whose signal slots
// are all taken (every tab offering at once after a restart), a WebSocket
// client's offer is refused as full, and the placement asks the same node
// again after its backoff rather than taking it as failed: every
// placement, at least two, is on node 1; the client is answered once a
// slot is free, and when none frees its error is the node's (busy, try
// again; Reply.Full), not "no SFU node is available (excluding nodes [1],
// which failed the client)".
func TestSingleNodeBusyRetried(t *testing.T) {
	for _, tc := range []struct {
		name    string
		freeAt  int // the placement on node 1 at which its slots free up; 0: never
		wantOp  string
		atLeast int // placements on node 1
	}{
		{"a slot frees", 2, "answer", 2},
		{"busy throughout", 0, "error", 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := startCluster(t, "a")
			n := c.nodes[0]
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			for range cap(n.signalSlots) {
				n.signalSlots <- struct{}{}
			}
			var (
				pmu    sync.Mutex
				placed []string
				freed  bool
			)
			free := func() {
				for range cap(n.signalSlots) {
					<-n.signalSlots
				}
			}
			defer func() {
				if !freed {
					free()
				}
			}()
			n.wsPlaced = func(a Assignment) {
				pmu.Lock()
				defer pmu.Unlock()
				placed = append(placed, a.Node)
				if len(placed) == tc.freeAt {
					free()
					freed = true
				}
			}
			ws := dialSignalling(t, ctx, n.Handler(), "a")
			if err := ws.WriteJSON(Signal{Op: "offer", Session: "s1", Client: "tab", SDP: recvOffer(t, 1)}); err != nil {
				t.Fatal(err)
			}
			var got Reply
			if err := ws.ReadJSON(&got); err != nil {
				t.Fatal(err)
			}
			pmu.Lock()
			defer pmu.Unlock()
			if got.Op != tc.wantOp || len(placed) < tc.atLeast || slices.ContainsFunc(placed, func(id string) bool { return id != "1" }) {
				t.Fatalf("offer to the only node, busy: %s %q (full %v), placed on %v; want %s after at least %d placements on node 1",
					got.Op, got.Error, got.Full, placed, tc.wantOp, tc.atLeast)
			}
			if got.Op == "error" && (!got.Full || !strings.Contains(got.Error, "busy") || !strings.Contains(got.Error, "try again") || strings.Contains(got.Error, "failed the client")) {
				t.Fatalf("error to a client of the only node, busy: %q (full %v); want the node's busy error, marked full", got.Error, got.Full)
			}
			t.Logf("%s %q after placements %v", got.Op, got.Error, placed)
		})
	}
}

// TestRejoinKeepsFullNode: a client on a node at Config.MaxClients that
// leaves and joins again at once (a tab reloading) is placed on the same
// node at its first placement, though the node's last heartbeat still
// counts its old connection: the manager counts the client there once and
// does not take the node as full for it.
func TestRejoinKeepsFullNode(t *testing.T) {
	c := startClusterWith(t, func(i int, cfg *Config) {
		cfg.Heartbeat = 2 * time.Second // the manager's count lags the leave
		if i == 0 {
			cfg.MaxClients = 1
		}
	}, "a", "b")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	dial := func() (*Client, []string) {
		var placed []string
		cl, err := Dial(ctx, ClientConfig{NC: c.conn(t, "tab"), Session: "s1", Client: "tab", Site: "a", ICEAddresses: loopback, VideoSlots: 1,
			placed: func(a Assignment) { placed = append(placed, a.Node) }})
		if err != nil {
			t.Fatalf("client at site a (placements %v): %v", placed, err)
		}
		return cl, placed
	}
	cl, placed := dial()
	if cl.Node != "1" {
		t.Fatalf("first join: node %s after placements %v, want 1", cl.Node, placed)
	}
	mgr := c.nodes[0].mgr
	waitFor(t, "the manager to have node 1's heartbeat with its client", func() bool {
		mgr.mu.Lock()
		defer mgr.mu.Unlock()
		ns := mgr.nodes["1"]
		return ns != nil && ns.info.Clients == 1
	})
	cl.Close()
	cl, placed = dial()
	defer cl.Close()
	if cl.Node != "1" || !slices.Equal(placed, []string{"1"}) {
		t.Fatalf("join again after a leave: node %s after placements %v; want node 1 at once", cl.Node, placed)
	}
}

package sfu

import (
	"context"
	"encoding/json"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
)

// slotEvent is the slot event of node for one mid carrying track ("" idle).
func slotEvent(node, mid, track string) Event {
	st := SlotStatus{Mid: mid}
	if track != "" {
		st.Track = &TrackInfo{Session: "s1", Client: "pub", Track: track, Kind: "video", Node: node}
	}
	return Event{Op: "slots", Node: node, Slots: []SlotStatus{st}}
}

func publishEvent(t *testing.T, nc *nats.Conn, ev Event) {
	t.Helper()
	b, _ := json.Marshal(ev)
	if err := nc.Publish(subjectEvents("s1", "pcbot"), b); err != nil {
		t.Fatal(err)
	}
}

// slotsSeen folds events into what each mid carries, the way a client
// reads them, and records the nodes they came from.
type slotsSeen struct {
	mu     sync.Mutex
	tracks map[string]string // mid → track ("" idle)
	nodes  []string
}

func (s *slotsSeen) add(ev Event) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.tracks == nil {
		s.tracks = map[string]string{}
	}
	if !slices.Contains(s.nodes, ev.Node) {
		s.nodes = append(s.nodes, ev.Node)
	}
	for _, st := range ev.Slots {
		s.tracks[st.Mid] = ""
		if st.Track != nil {
			s.tracks[st.Mid] = st.Track.Track
		}
	}
}

func (s *slotsSeen) has(mid string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, ok := s.tracks[mid]
	return ok
}

// TestEventsOnlyFromPlacedNode: node 9 (site b) answers the manager's
// pings, takes the client's offer and sends slot events for it, but never
// answers the offer; the client is placed on another node. The failed
// node's events, those it sent while the placement waited for it and those
// it sends later, must not reach the client: they name slots of a
// connection the client does not have (the subject of a client's events is
// the same on every node). It fails if the WebSocket handler forwards
// every event on the subject to the browser, or the Go client passes
// every one to OnEvent.
func TestEventsOnlyFromPlacedNode(t *testing.T) {
	fail := func(t *testing.T, c *cluster, ctx context.Context, id string) {
		fakeNode(t, ctx, c, id, "b", func(m *nats.Msg) {
			var s Signal
			if json.Unmarshal(m.Data, &s) != nil {
				return
			}
			switch s.Op {
			case "ping":
				respondSignal(m, Reply{Op: "ok", Site: "b"})
			case "offer": // takes it, says what its slot 0 carries, never answers
				publishEvent(t, c.conn(t, "fake"+id+"-events"), slotEvent(id, "0", "ghost"))
			}
		})
	}
	timeout := func(node string) time.Duration {
		if node == "9" || node == "7" {
			return 300 * time.Millisecond
		}
		return offerTimeout
	}

	t.Run("bus", func(t *testing.T) {
		c, _ := startLoggedCluster(t, "a")
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		fail(t, c, ctx, "9")
		var seen slotsSeen
		cl, err := Dial(ctx, ClientConfig{NC: c.conn(t, "pcbot"), Session: "s1", Client: "pcbot", Site: "b", ICEAddresses: loopback, VideoSlots: 1,
			OnEvent: seen.add, offerTimeout: timeout})
		if err != nil {
			t.Fatal(err)
		}
		defer cl.Close()
		if cl.Node != "1" {
			t.Fatalf("client on node %s, want 1", cl.Node)
		}
		// node 9 goes on sending events for the client; then one of node
		// 1's (forged here, from the same connection, so that it arrives
		// after node 9's)
		nc := c.conn(t, "events")
		publishEvent(t, nc, slotEvent("9", "0", "ghost2"))
		publishEvent(t, nc, slotEvent("1", "marker", ""))
		waitFor(t, "node 1's event", func() bool { return seen.has("marker") })
		seen.mu.Lock()
		defer seen.mu.Unlock()
		if _, ghost := seen.tracks["0"]; ghost || !slices.Equal(seen.nodes, []string{"1"}) {
			t.Fatalf("events from nodes %v, slots %v; want node 1's only", seen.nodes, seen.tracks)
		}
	})

	t.Run("WebSocket", func(t *testing.T) {
		c, _ := startLoggedCluster(t, "a")
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		fail(t, c, ctx, "7")
		// node 8 (site b, tried after node 7) says twice what its slot 1
		// carries before it answers: held during the placement, merged
		fakeNode(t, ctx, c, "8", "b", func(m *nats.Msg) {
			var s Signal
			if json.Unmarshal(m.Data, &s) != nil || s.Op == "leave" {
				return
			}
			if s.Op == "offer" {
				nc := c.conn(t, "fake8-events")
				publishEvent(t, nc, slotEvent("8", "1", "first"))
				publishEvent(t, nc, slotEvent("8", "1", "second"))
				if err := nc.Flush(); err != nil {
					t.Error(err)
				}
				respondSignal(m, Reply{Op: "answer", SDP: "v=0"})
				return
			}
			respondSignal(m, Reply{Op: "ok", Site: "b"})
		})
		n1 := c.nodes[0]
		var (
			pmu    sync.Mutex
			placed []string
		)
		n1.wsPlaced = func(a Assignment) {
			pmu.Lock()
			placed = append(placed, a.Node)
			pmu.Unlock()
		}
		n1.wsOfferTimeout = timeout
		ws := dialSignalling(t, ctx, n1.Handler(), "b")
		if err := ws.WriteJSON(Signal{Op: "offer", Session: "s1", Client: "pcbot", SDP: "v=0"}); err != nil {
			t.Fatal(err)
		}
		var seen slotsSeen
		answered := false
		for !seen.has("marker") {
			var msg struct {
				Op    string       `json:"op"`
				Slots []SlotStatus `json:"slots"`
				Node  string       `json:"node"`
				Error string       `json:"error"`
			}
			if err := ws.ReadJSON(&msg); err != nil {
				t.Fatal(err)
			}
			switch msg.Op {
			case "slots":
				seen.add(Event{Op: "slots", Slots: msg.Slots, Node: msg.Node})
			case "answer":
				answered = true
				pmu.Lock()
				if !slices.Equal(placed, []string{"7", "8"}) {
					t.Fatalf("placed on %v, want node 8 after node 7", placed)
				}
				pmu.Unlock()
				nc := c.conn(t, "events")
				publishEvent(t, nc, slotEvent("7", "0", "ghost2"))
				publishEvent(t, nc, slotEvent("8", "marker", ""))
			default:
				t.Fatalf("reply %+v", msg)
			}
		}
		if !answered {
			t.Fatal("no answer")
		}
		seen.mu.Lock()
		defer seen.mu.Unlock()
		if _, ghost := seen.tracks["0"]; ghost || !slices.Equal(seen.nodes, []string{"8"}) || seen.tracks["1"] != "second" {
			t.Fatalf("events from nodes %v, slots %v; want node 8's only, slot 1 carrying its last", seen.nodes, seen.tracks)
		}
	})
}

func TestEventGate(t *testing.T) {
	var got []Event
	g := newEventGate(func(ev Event) { got = append(got, ev) })
	g.event(slotEvent("1", "0", "before any offer"))
	g.try("1")
	g.event(slotEvent("1", "0", "a"))
	g.event(slotEvent("1", "1", "b"))
	g.try("2") // node 1 failed the client: its events are dropped
	g.event(slotEvent("1", "0", "late"))
	g.event(slotEvent("2", "0", "c"))
	g.event(slotEvent("2", "2", "d"))
	g.event(slotEvent("2", "0", ""))
	if len(got) != 0 {
		t.Fatalf("events passed on during the placement: %+v", got)
	}
	g.place()
	g.event(slotEvent("1", "1", "late again"))
	g.event(slotEvent("2", "2", "e"))
	g.event(Event{Op: "slots", Slots: []SlotStatus{{Mid: "3"}}}) // an older node's: no node
	want := []Event{
		{Op: "slots", Node: "2", Slots: []SlotStatus{{Mid: "0"}, slotEvent("2", "2", "d").Slots[0]}},
		slotEvent("2", "2", "e"),
		{Op: "slots", Slots: []SlotStatus{{Mid: "3"}}},
	}
	gb, _ := json.Marshal(got)
	wb, _ := json.Marshal(want)
	if string(gb) != string(wb) {
		t.Fatalf("passed on\n%s\nwant\n%s", gb, wb)
	}
}

// TestPrunePoses: a node hears every session's poses on the bus; it keeps
// those of its own clients and of publishers in the track directory, and
// forgets the others once they are poseGrace old. It fails if the node
// keeps the pose of every client that ever sent one, for good.
func TestPrunePoses(t *testing.T) {
	c := startCluster(t, "a")
	n := c.nodes[0]
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	me, err := Dial(ctx, ClientConfig{NC: c.conn(t, "me"), Session: "s1", Client: "me", Site: "a", ICEAddresses: loopback, VideoSlots: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer me.Close()
	if err := me.SetPose(ctx, Pose{FOV: 1}); err != nil {
		t.Fatal(err)
	}
	nc := c.conn(t, "bus")
	// a publisher on another node
	b, _ := json.Marshal(TrackEvent{Op: "add", Track: TrackInfo{Session: "s1", Client: "pub", Track: "pc0", Kind: "video", Mime: MimeTypePointCloud, Node: "5"}})
	if err := nc.Publish("sfu.tracks.s1", b); err != nil {
		t.Fatal(err)
	}
	clients := []string{"pub"}
	for i := range 100 {
		clients = append(clients, "gone"+strconv.Itoa(i))
	}
	for _, cl := range clients {
		b, _ := json.Marshal(PoseMessage{Session: "s1", Client: cl, Pose: Pose{FOV: 2}})
		if err := nc.Publish("sfu.poses.s1", b); err != nil {
			t.Fatal(err)
		}
	}
	known := func(client string) bool {
		n.mu.Lock()
		defer n.mu.Unlock()
		return n.poseOf("s1/"+client) != nil
	}
	waitFor(t, "the poses and the publisher's track", func() bool {
		n.mu.Lock()
		_, pub := n.directory["s1/pub/pc0"]
		n.mu.Unlock()
		return pub && known("me") && known("gone99")
	})
	n.prunePoses(time.Now())
	for _, cl := range append(clients, "me") {
		if !known(cl) {
			t.Fatalf("pose of %s forgotten within its grace", cl)
		}
	}
	n.prunePoses(time.Now().Add(poseGrace))
	for _, cl := range clients[1:] {
		if known(cl) {
			t.Fatalf("pose of %s (not connected here, publishing nothing) kept after its grace", cl)
		}
	}
	if !known("me") || !known("pub") {
		t.Fatalf("pose of the node's client (%v) or of a publisher (%v) forgotten", known("me"), known("pub"))
	}
}

package sfu

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"
)

// pick is m.assign without a node's answer: the nodes of these tests do
// not number their heartbeats (NodeInfo.Beat), so none is asked.
func pick(m *Manager, req JoinRequest, now time.Time) Assignment {
	a, _ := m.assign(req, now, nil)
	return a
}

func TestAssignNearSites(t *testing.T) {
	m := &Manager{log: slog.New(slog.DiscardHandler), nodes: map[string]*nodeState{}, assigned: map[string]assignedTo{}}
	now := time.Now()
	for _, n := range []NodeInfo{{ID: "1", Site: "s1", Clients: 9}, {ID: "2", Site: "s2", Clients: 0}} {
		m.nodes[n.ID] = newNodeState(n, now)
	}
	tests := []struct {
		client, site string
		near         []string
		want         string
	}{
		{"a", "s1", nil, "1"},                  // own site, although loaded
		{"b", "s3", []string{"s1"}, "1"},       // no node at s3: its near site
		{"c", "s4", nil, "2"},                  // no preference: least loaded
		{"d", "s4", []string{"s9", "s2"}, "2"}, // first near site with a node
	}
	for _, tc := range tests {
		if a := pick(m, JoinRequest{Session: "s", Client: tc.client, Site: tc.site, Near: tc.near}, now); a.Node != tc.want {
			t.Errorf("client %s at %s near %v: node %s, want %s", tc.client, tc.site, tc.near, a.Node, tc.want)
		}
	}
}

// SessionOf names a scene's session as the web client's sfuSession does:
// one '_' per UTF-16 code unit of a character an id may not hold, at most
// 64 of them.
func TestSessionOf(t *testing.T) {
	for _, tt := range []struct{ ns, scene, want string }{
		{"public", "lobby", "public-lobby"},
		{"lab", "room 1", "lab-room_1"},
		{"é", "x.y", "_-x_y"},
		{"ns", "😀", "ns-__"},
		{strings.Repeat("a", 40), strings.Repeat("b", 40), strings.Repeat("a", 40) + "-" + strings.Repeat("b", 23)},
	} {
		got := SessionOf(tt.ns, tt.scene)
		if got != tt.want || validName("session", got) != nil {
			t.Errorf("SessionOf(%q, %q) = %q, want %q (a valid id)", tt.ns, tt.scene, got, tt.want)
		}
	}
}

// TestAssignExclude: a join that excludes nodes (the client's retry after
// they failed it) is placed elsewhere, even when the client was given an
// excluded node before and it is alive, and then keeps its new node.
func TestAssignExclude(t *testing.T) {
	m := &Manager{log: slog.New(slog.DiscardHandler), nodes: map[string]*nodeState{}, assigned: map[string]assignedTo{}}
	now := time.Now()
	for _, n := range []NodeInfo{{ID: "1", Site: "s1"}, {ID: "2", Site: "s2"}, {ID: "3", Site: "s3"}} {
		m.nodes[n.ID] = newNodeState(n, now)
	}
	req := JoinRequest{Session: "s", Client: "c", Site: "s1", Near: []string{"s3"}}
	for _, tc := range []struct {
		exclude []string
		want    string
	}{
		{nil, "1"},
		{[]string{"1"}, "3"},      // its near site, not the sticky node
		{nil, "3"},                // keeps the node it has now
		{[]string{"3", "1"}, "2"}, // excluded in any order
		{[]string{"2", "3"}, "1"}, // the node given before, again allowed
	} {
		req.Exclude = tc.exclude
		if a := pick(m, req, now); a.Node != tc.want || a.Error != "" {
			t.Errorf("exclude %v: %+v, want node %s", tc.exclude, a, tc.want)
		}
	}
	req.Exclude = []string{"1", "2", "3"}
	if a := pick(m, req, now); a.Node != "" || !strings.Contains(a.Error, "excluding nodes [1 2 3]") {
		t.Errorf("every node excluded: %+v, want an error naming them", a)
	}
}

// TestManagerBusyLog: the manager logs that it is busy once when a join
// finds maxPlacing being placed, and that it no longer is once placing
// falls below busyLowWater, not each time a placement ends under
// sustained overload.
func TestManagerBusyLog(t *testing.T) {
	logs := &logLines{}
	m := &Manager{log: logs.logger(), nodes: map[string]*nodeState{}, assigned: map[string]assignedTo{}}
	m.ctx, m.cancel = context.WithCancel(context.Background())
	defer m.cancel()
	busy := `msg="sfu manager busy: joins answered busy until placements end"`
	notBusy := `msg="sfu manager no longer busy"`
	fill := func() {
		for m.placing < maxPlacing {
			if err := m.begin(); err != nil {
				t.Fatalf("placing %d: %v", m.placing, err)
			}
		}
	}
	fill()
	for range 3 { // sustained overload: a placement ends, a join takes its place, the next is refused
		if err := m.begin(); !errors.Is(err, ErrBusy) {
			t.Fatalf("join beyond maxPlacing: %v, want ErrBusy", err)
		}
		m.end()
		fill()
	}
	if n, k := logs.count(busy), logs.count(notBusy); n != 1 || k != 0 {
		t.Errorf("under sustained overload: %d busy and %d no-longer-busy lines, want 1 and 0", n, k)
	}
	for m.placing > busyLowWater {
		m.end()
	}
	if logs.has(notBusy) {
		t.Errorf("no longer busy at %d being placed, want below %d", m.placing, busyLowWater)
	}
	m.end()
	if !logs.has(notBusy, "refused=3", fmt.Sprintf("placing=%d", busyLowWater-1)) {
		t.Errorf("the manager did not log that it is no longer busy, with the 3 joins it refused:\n%s", logs.String())
	}
	fill()
	if err := m.begin(); !errors.Is(err, ErrBusy) {
		t.Fatalf("join beyond maxPlacing: %v, want ErrBusy", err)
	}
	if n := logs.count(busy); n != 2 {
		t.Errorf("%d busy lines after a second spell, want 2", n)
	}
	for m.placing > 0 {
		m.end()
	}
}

// TestAssignedForgotten: the manager remembers a client's node for
// assignedTTL after its last join, and not at all once the node is gone,
// so that the map of assignments does not grow with every client id ever
// placed; a client it remembers keeps its node.
func TestAssignedForgotten(t *testing.T) {
	m := &Manager{log: slog.New(slog.DiscardHandler), nodes: map[string]*nodeState{}, assigned: map[string]assignedTo{}}
	t0 := time.Now()
	seen := func(now time.Time, ids ...string) {
		for _, id := range ids {
			m.nodes[id] = newNodeState(NodeInfo{ID: id, Site: "s" + id}, now)
		}
	}
	seen(t0, "1", "2")
	for i := range 1000 {
		if a := pick(m, JoinRequest{Session: "s", Client: fmt.Sprint("c", i), Site: "s2"}, t0); a.Node != "2" {
			t.Fatalf("client %d: %+v", i, a)
		}
	}
	if a := pick(m, JoinRequest{Session: "s", Client: "kept", Site: "s2"}, t0); a.Node != "2" {
		t.Fatalf("kept: %+v", a)
	}
	// within the TTL a client keeps its node, even from another site
	t1 := t0.Add(assignedTTL / 2)
	seen(t1, "1", "2")
	if a := pick(m, JoinRequest{Session: "s", Client: "kept", Site: "s1"}, t1); a.Node != "2" {
		t.Fatalf("kept within the TTL: %+v, want node 2", a)
	}
	// after it, only the client that joined again is remembered
	t2 := t0.Add(assignedTTL)
	seen(t2, "1", "2")
	pick(m, JoinRequest{Session: "s", Client: "new", Site: "s1"}, t2)
	if len(m.assigned) != 2 {
		t.Fatalf("%d assignments remembered after the TTL, want 2 (kept, new)", len(m.assigned))
	}
	if a := pick(m, JoinRequest{Session: "s", Client: "kept", Site: "s1"}, t2); a.Node != "2" {
		t.Fatalf("kept, joined again %v ago: %+v, want node 2", assignedTTL/2, a)
	}
	// a node that is gone: its clients are forgotten
	delete(m.nodes, "2")
	t3 := t2.Add(pruneEvery)
	seen(t3, "1")
	pick(m, JoinRequest{Session: "s", Client: "other", Site: "s1"}, t3)
	if _, ok := m.assigned["s/kept"]; ok || len(m.assigned) != 2 {
		t.Fatalf("assignments after node 2 went: %v, want new and other on node 1", m.assigned)
	}
}

// TestAssignSkipsFullNodes: a node whose heartbeat gives as many clients
// as it takes (NodeInfo.MaxClients), counting the clients placed there
// since, gets a client only when no other node has room, even one at
// another site; a client given a node that is full now moves. A full
// node would refuse each client, which would ask again.
func TestAssignSkipsFullNodes(t *testing.T) {
	tests := []struct {
		name    string
		nodes   []NodeInfo
		clients []string // joining at site a, in order
		want    []string
	}{
		{"own site full: least loaded with room",
			[]NodeInfo{{ID: "1", Site: "a", Clients: 2, MaxClients: 2}, {ID: "2", Site: "b", Clients: 5, MaxClients: 500}, {ID: "3", Site: "c", Clients: 9}},
			[]string{"u1"}, []string{"2"}},
		{"filled by the placements since the heartbeat",
			[]NodeInfo{{ID: "1", Site: "a", Clients: 1, MaxClients: 2}, {ID: "2", Site: "b", MaxClients: 2}},
			[]string{"u1", "u2", "u3"}, []string{"1", "2", "2"}},
		{"all full: its site's, as before",
			[]NodeInfo{{ID: "1", Site: "a", Clients: 2, MaxClients: 2}, {ID: "2", Site: "b", Clients: 1, MaxClients: 1}},
			[]string{"u1"}, []string{"1"}},
		{"no bound known (an older node): never full",
			[]NodeInfo{{ID: "1", Site: "a", Clients: 900}, {ID: "2", Site: "b", MaxClients: 10}},
			[]string{"u1"}, []string{"1"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m := &Manager{log: slog.New(slog.DiscardHandler), nodes: map[string]*nodeState{}, assigned: map[string]assignedTo{}}
			now := time.Now()
			for _, n := range tc.nodes {
				m.nodes[n.ID] = newNodeState(n, now)
			}
			var got []string
			for _, c := range tc.clients {
				got = append(got, pick(m, JoinRequest{Session: "s", Client: c, Site: "a"}, now).Node)
			}
			if fmt.Sprint(got) != fmt.Sprint(tc.want) {
				t.Fatalf("clients %v placed on %v, want %v", tc.clients, got, tc.want)
			}
		})
	}
	// A client given node 1 before joins again: it keeps node 1 while
	// node 1 has room for it, counting its own old connection, which the
	// heartbeat's Clients includes until the heartbeat after its leave (a
	// tab reloading on a node at MaxClients); it moves once node 1 is full
	// without it.
	for _, tc := range []struct {
		name    string
		clients int // node 1's heartbeat, MaxClients 2
		placed  int // clients placed on node 1 since
		want    string
	}{
		{"room", 1, 0, "1"},
		{"at MaxClients with the client itself", 2, 0, "1"},
		{"full with one placed since", 2, 1, "2"},
		{"full without the client", 1, 2, "2"},
	} {
		t.Run("joins again: "+tc.name, func(t *testing.T) {
			m := &Manager{log: slog.New(slog.DiscardHandler), nodes: map[string]*nodeState{}, assigned: map[string]assignedTo{}}
			now := time.Now()
			m.nodes["1"] = newNodeState(NodeInfo{ID: "1", Site: "a", MaxClients: 2}, now)
			m.nodes["2"] = newNodeState(NodeInfo{ID: "2", Site: "b", MaxClients: 2}, now)
			req := JoinRequest{Session: "s", Client: "u1", Site: "a"}
			if a := pick(m, req, now); a.Node != "1" {
				t.Fatalf("first join: node %s, want 1", a.Node)
			}
			m.nodes["1"] = newNodeState(NodeInfo{ID: "1", Site: "a", Clients: tc.clients, MaxClients: 2}, now)
			for i := range tc.placed {
				m.nodes["1"].placed[fmt.Sprint("s/other", i)] = 1
			}
			if a := pick(m, req, now); a.Node != tc.want {
				t.Fatalf("join again with node 1 at %d clients of 2, %d placed since: node %s, want %s", tc.clients, tc.placed, a.Node, tc.want)
			}
		})
	}
}

// TestExcludedNodeForgetsPlacement: a client placed on node 1 (site a,
// one client at most) that joins again excluding it goes to node 2, and
// node 1 no longer counts it as placed there. When node 1 did not answer
// the client's offer, node 1 takes the next client of its site at once.
// When node 1 refused the client as full (JoinRequest.Full), the
// manager's count for it was too low: node 1 is full until its next
// heartbeat, which then gives its count (here none), and the next clients
// of its site go elsewhere meanwhile. The refused client does not count
// after that heartbeat either, also when the ping of its placement was
// answered at that heartbeat, before the manager had it.
func TestExcludedNodeForgetsPlacement(t *testing.T) {
	type join struct {
		client          string
		exclude, full   []string
		heartbeat, want string   // heartbeat: node 1's, with no clients, comes before the join
		ahead           bool     // the ping's answer names a heartbeat of the node after the manager's
		placed1         []string // the placements node 1 counts after the join
	}
	for _, tc := range []struct {
		name  string
		joins []join
	}{
		{"did not answer", []join{
			{client: "c1", want: "1", placed1: []string{"s/c1"}},
			{client: "c1", exclude: []string{"1"}, want: "2"},
			{client: "c2", want: "1", placed1: []string{"s/c2"}},
		}},
		{"refused as full", []join{
			{client: "c1", want: "1", placed1: []string{"s/c1"}},
			{client: "c1", exclude: []string{"1"}, full: []string{"1"}, want: "2"},
			{client: "c2", want: "3"},
			{client: "c3", heartbeat: "1", want: "1", placed1: []string{"s/c3"}},
		}},
		{"refused as full, the ping answered at a heartbeat the manager has not", []join{
			{client: "c1", ahead: true, want: "1", placed1: []string{"s/c1"}},
			{client: "c1", exclude: []string{"1"}, full: []string{"1"}, want: "2"},
			{client: "c2", heartbeat: "1", want: "1", placed1: []string{"s/c2"}},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := &Manager{log: slog.New(slog.DiscardHandler), nodes: map[string]*nodeState{}, assigned: map[string]assignedTo{}}
			now := time.Now()
			n1 := NodeInfo{ID: "1", Site: "a", MaxClients: 1, Beat: 5}
			for _, n := range []NodeInfo{n1, {ID: "2", Site: "b", MaxClients: 1, Beat: 5}, {ID: "3", Site: "c", Beat: 5}} {
				m.nodes[n.ID] = newNodeState(n, now)
			}
			for _, j := range tc.joins {
				if j.heartbeat != "" {
					n1.Beat++
					m.nodes["1"].heartbeat(n1, now)
				}
				req := JoinRequest{Session: "s", Client: j.client, Site: "a", Exclude: j.exclude, Full: j.full}
				a, ask := m.assign(req, now, nil)
				if a.Node != j.want || ask {
					t.Fatalf("%s excluding %v (full %v): node %s (ask %v), want %s; placements counted: 1 %v, 2 %v",
						j.client, j.exclude, j.full, a.Node, ask, j.want, m.nodes["1"].placed, m.nodes["2"].placed)
				}
				// the node's answer to the placement's ping, at its last heartbeat
				beat := m.nodes[a.Node].info.Beat
				if j.ahead {
					beat++
				}
				m.settle(a.Node, "s/"+j.client, Reply{Op: "ok", Beat: beat})
				if placed := slices.Sorted(maps.Keys(m.nodes["1"].placed)); !slices.Equal(placed, j.placed1) {
					t.Fatalf("%s excluding %v (full %v): node 1 counts placements %v, want %v", j.client, j.exclude, j.full, placed, j.placed1)
				}
			}
		})
	}
}

// TestRejoinElsewhereForgetsPlacement: a client placed on node 1 that
// joins again when node 1 has no room for it is placed on node 2, and
// node 1 no longer counts it as placed there; its other placements stay.
func TestRejoinElsewhereForgetsPlacement(t *testing.T) {
	m := &Manager{log: slog.New(slog.DiscardHandler), nodes: map[string]*nodeState{}, assigned: map[string]assignedTo{}}
	now := time.Now()
	n1 := newNodeState(NodeInfo{ID: "1", Site: "a", Clients: 1, MaxClients: 2, Beat: 5}, now)
	n1.placed["s/u1"], n1.placed["s/other"] = 5, 5
	m.nodes["1"] = n1
	m.nodes["2"] = newNodeState(NodeInfo{ID: "2", Site: "b", MaxClients: 2, Beat: 5}, now)
	m.assigned["s/u1"] = assignedTo{node: "1", at: now}
	if a, ask := m.assign(JoinRequest{Session: "s", Client: "u1", Site: "a"}, now, nil); a.Node != "2" || ask {
		t.Fatalf("u1 joining again, node 1 full without it: node %s (ask %v), want 2", a.Node, ask)
	}
	if want := map[string]uint64{"s/other": 5}; !maps.Equal(n1.placed, want) {
		t.Fatalf("placements on node 1 after u1 moved to node 2: %v, want %v", n1.placed, want)
	}
}

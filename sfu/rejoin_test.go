package sfu

import (
	"fmt"
	"log/slog"
	"maps"
	"testing"
	"time"
)

// TestRejoinCount: a client that joins again, given node 1 (at most 2
// clients) before, is kept there while node 1 has room for it, counted
// once: not again when it is among the placements since the heartbeat
// or when node 1 says its heartbeat counts it; as one client more when
// node 1 says its heartbeat does not (it left before), if that heartbeat
// is the one the manager has; an answer about another (later, earlier,
// another instance's) is taken as counted. Node 1 is asked
// unless the answer could not change the choice or the node does not
// number its heartbeats (an older node, whose count is taken to hold the
// client).
func TestRejoinCount(t *testing.T) {
	counted, dropped := &rejoinAnswer{node: "1", beat: 5, counted: true}, &rejoinAnswer{node: "1", beat: 5}
	for _, tc := range []struct {
		name     string
		beat     uint64 // node 1's heartbeat number; 0: an older node
		clients  int    // node 1's heartbeat
		placed   int    // other clients placed on node 1 since
		mine     bool   // the client is among them
		heard    *rejoinAnswer
		want     string
		wantAsk  bool
		wantLoad int // node 1's clients for the manager after
	}{
		{name: "placed since the heartbeat", beat: 5, clients: 1, mine: true, want: "1", wantLoad: 2},
		{name: "not asked", beat: 5, clients: 1, want: "1", wantAsk: true, wantLoad: 1},
		{name: "counted by the heartbeat", beat: 5, clients: 2, heard: counted, want: "1", wantLoad: 2},
		{name: "counted, full without it", beat: 5, clients: 2, placed: 1, heard: counted, want: "2", wantLoad: 3},
		{name: "full however node 1 answers: not asked", beat: 5, clients: 2, placed: 1, want: "2", wantLoad: 3},
		{name: "no longer counted: one client more", beat: 5, clients: 1, heard: dropped, want: "1", wantLoad: 2},
		{name: "no longer counted, no room", beat: 5, clients: 2, heard: dropped, want: "2", wantLoad: 2},
		{name: "an older node: counted", clients: 2, want: "1", wantLoad: 2},
		{name: "another node's answer: counted", beat: 5, clients: 2, heard: &rejoinAnswer{node: "2"}, want: "1", wantLoad: 2},
		// an answer about another heartbeat than the manager's says
		// nothing of its count: the client is taken as counted
		{name: "no longer counted by a later heartbeat", beat: 5, clients: 1, heard: &rejoinAnswer{node: "1", beat: 6}, want: "1", wantLoad: 1},
		{name: "no longer counted by an earlier heartbeat", beat: 5, clients: 1, heard: &rejoinAnswer{node: "1", beat: 4}, want: "1", wantLoad: 1},
		{name: "no longer counted by another instance", beat: 5, clients: 1, heard: &rejoinAnswer{node: "1", instance: "j", beat: 5}, want: "1", wantLoad: 1},
		{name: "counted by a later heartbeat, full without it", beat: 5, clients: 2, placed: 1, heard: &rejoinAnswer{node: "1", beat: 6, counted: true}, want: "2", wantLoad: 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := &Manager{log: slog.New(slog.DiscardHandler), nodes: map[string]*nodeState{}, assigned: map[string]assignedTo{}}
			now := time.Now()
			n1 := newNodeState(NodeInfo{ID: "1", Site: "a", Clients: tc.clients, MaxClients: 2, Beat: tc.beat}, now)
			for i := range tc.placed {
				n1.placed[fmt.Sprint("s/other", i)] = tc.beat
			}
			if tc.mine {
				n1.placed["s/u1"] = tc.beat
			}
			m.nodes["1"] = n1
			m.nodes["2"] = newNodeState(NodeInfo{ID: "2", Site: "b", MaxClients: 2, Beat: 9}, now)
			m.assigned["s/u1"] = assignedTo{node: "1", at: now}
			a, ask := m.assign(JoinRequest{Session: "s", Client: "u1", Site: "a"}, now, tc.heard)
			if a.Node != tc.want || ask != tc.wantAsk || n1.load() != tc.wantLoad {
				t.Fatalf("node %s, ask %v, node 1's load %d; want node %s, ask %v, load %d", a.Node, ask, n1.load(), tc.want, tc.wantAsk, tc.wantLoad)
			}
		})
	}
}

// TestPlacedSettled: the manager counts a placement on a node until it
// has a heartbeat of the node after the one the node's ping answer names
// (Reply.Beat), or not at all when that heartbeat counted the client
// already; an answer of a node that does not number its heartbeats, or
// of another instance, has it counted until the heartbeat after the one
// the manager has, and a heartbeat of an older node forgets it.
func TestPlacedSettled(t *testing.T) {
	const provisional = 6 // the manager has heartbeat 5
	for _, tc := range []struct {
		name string
		rep  Reply
		want map[string]uint64 // after the answer
		// after heartbeat 6, 7 of the instance; after one of an older node
		after6, after7, afterOld map[string]uint64
	}{
		{"answered at 5", Reply{Beat: 5, Instance: "i"}, map[string]uint64{"s/c": 5}, nil, nil, nil},
		{"answered at 6, before the manager has it", Reply{Beat: 6, Instance: "i"}, map[string]uint64{"s/c": 6}, map[string]uint64{"s/c": 6}, nil, nil},
		{"counted by heartbeat 5", Reply{Beat: 5, Instance: "i", Counted: true}, map[string]uint64{}, nil, nil, nil},
		{"an older node", Reply{Instance: "i"}, map[string]uint64{"s/c": provisional}, map[string]uint64{"s/c": provisional}, nil, nil},
		{"another instance", Reply{Beat: 5, Instance: "j"}, map[string]uint64{"s/c": provisional}, map[string]uint64{"s/c": provisional}, nil, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := &Manager{log: slog.New(slog.DiscardHandler), nodes: map[string]*nodeState{}, assigned: map[string]assignedTo{}}
			now := time.Now()
			info := NodeInfo{ID: "1", Site: "a", Instance: "i", Beat: 5}
			ns := newNodeState(info, now)
			m.nodes["1"] = ns
			if a, _ := m.assign(JoinRequest{Session: "s", Client: "c", Site: "a"}, now, nil); a.Node != "1" || ns.placed["s/c"] != awaitingPing {
				t.Fatalf("placed on %q, counted %v; want node 1, awaiting its ping", a.Node, ns.placed)
			}
			m.settle("1", "s/c", tc.rep)
			check := func(when string, want map[string]uint64) {
				t.Helper()
				if want == nil {
					want = map[string]uint64{}
				}
				if !maps.Equal(ns.placed, want) {
					t.Errorf("%s: placements counted %v, want %v", when, ns.placed, want)
				}
			}
			check("answered", tc.want)
			keep := maps.Clone(ns.placed)
			for beat, want := range map[uint64]map[string]uint64{6: tc.after6, 7: tc.after7} {
				ns.placed = maps.Clone(keep)
				info.Beat = beat
				ns.heartbeat(info, now)
				check(fmt.Sprintf("after heartbeat %d", beat), want)
			}
			ns.placed = maps.Clone(keep)
			info.Beat = 0
			ns.heartbeat(info, now)
			check("after an older node's heartbeat", tc.afterOld)
		})
	}
}

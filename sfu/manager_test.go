package sfu

import (
	"log/slog"
	"strings"
	"testing"
	"time"
)

func TestAssignNearSites(t *testing.T) {
	m := &Manager{log: slog.New(slog.DiscardHandler), nodes: map[string]*nodeState{}, assigned: map[string]string{}}
	now := time.Now()
	for _, n := range []NodeInfo{{ID: "1", Site: "s1", Clients: 9}, {ID: "2", Site: "s2", Clients: 0}} {
		m.nodes[n.ID] = &nodeState{info: n, seen: now}
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
		if a := m.Assign(JoinRequest{Session: "s", Client: tc.client, Site: tc.site, Near: tc.near}, now); a.Node != tc.want {
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

package sfu

import (
	"log/slog"
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

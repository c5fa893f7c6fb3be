package sfu

import "testing"

func (c *cluster) dump(t *testing.T) {
	for _, n := range c.nodes {
		n.mu.Lock()
		t.Logf("node %s: dir=%d local=%d relayed=%d links=%d peers=%d", n.ID(), len(n.directory), len(n.local), len(n.relayed), len(n.links), len(n.peers))
		for k, s := range n.local {
			t.Logf("  local %s pkts=%d relays=%d downs=%d", k, s.packets.Load(), len(s.relays), len(s.downs))
		}
		for k, s := range n.relayed {
			t.Logf("  relayed %s pkts=%d downs=%d", k, s.packets.Load(), len(s.downs))
		}
		for _, p := range n.peers {
			t.Logf("  peer %s budget=%v allocated=%v", p.client, p.budget, p.allocated)
			for _, sl := range p.slots {
				t.Logf("  peer %s slot %s kind=%v src=%v stats=%+v", p.client, sl.mid, sl.kind, sl.src != nil, sl.dt.Stats())
			}
		}
		n.mu.Unlock()
	}
}

package sfu

import "time"

// Clients placed on a node but not connected yet. The manager counts a
// node's clients from its heartbeats (NodeInfo.Clients) and the clients it
// placed there that those heartbeats do not count yet (nodeState.placed).
// A placed client's offer reaches the node a bus round trip or more after
// the manager's ping: so that a heartbeat in between counts it, the
// manager's ping of a placement (Signal.Place) tells the node to expect
// the client, and the node counts it from its next heartbeat on, until
// its offer or its leave comes or expectGrace passes. The ping's reply gives the
// number of the node's last heartbeat (Reply.Beat): the heartbeats after
// it count the client, and the manager counts it itself until it has one
// of them.

// expectGrace is how long a node counts a placed client whose offer has
// not come. A placed client sends its offer as soon as it has the
// manager's answer (placement.once); one that has not within expectGrace
// went to another node, or away.
const expectGrace = 5 * time.Second

// expect notes that the manager placed client key ("session/client") here
// at now; n.mu must be held. The clients expected are at most
// Config.MaxClients: with as many the node is full for the manager.
func (n *Node) expect(key string, now time.Time) {
	if _, ok := n.expected[key]; ok || len(n.expected) < n.cfg.MaxClients {
		n.expected[key] = now
	}
}

// unexpect notes that an offer of client key came, taken or refused, or
// its leave: the node counts the client as connected (its peer), or not
// at all.
func (n *Node) unexpect(key string) {
	n.mu.Lock()
	delete(n.expected, key)
	n.mu.Unlock()
}

// clientsCounted is the clients a heartbeat at now counts: those
// connected and those expected, each once. It notes them in n.counted
// (for Reply.Counted) and forgets the expectations older than
// expectGrace. n.mu must be held.
func (n *Node) clientsCounted(now time.Time) int {
	clear(n.counted)
	for key := range n.peers {
		n.counted[key] = struct{}{}
	}
	for key, at := range n.expected {
		if now.Sub(at) >= expectGrace {
			delete(n.expected, key)
			continue
		}
		n.counted[key] = struct{}{}
	}
	return len(n.counted)
}

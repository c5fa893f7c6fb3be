package sfu

import (
	"encoding/json"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/xrealm/xrealm/sfu/relay"
)

// Node liveness. The manager and every node learn which nodes are alive
// the same way: from the heartbeats (NodeInfo) on subjectNodes, a node
// being alive while its last heartbeat is younger than nodeTTL, and gone
// at once when it announces that it leaves (unless the leave is another
// instance's: staleLeave). The manager places clients on live nodes; a node
// removes a gone node's tracks from its directory (purgeNode): a node that
// crashes announces neither its leaving nor its tracks' removal, and
// without the purge its tracks would stay in every other node's directory
// for good.

// parseNodeInfo decodes a message on subjectNodes; ok is false for one
// that is not a NodeInfo with a valid ID.
func parseNodeInfo(data []byte) (info NodeInfo, ok bool) {
	if json.Unmarshal(data, &info) != nil || validName("node", info.ID) != nil {
		return NodeInfo{}, false
	}
	return info, true
}

// staleLeave reports whether info is a leave announcement from another
// instance than current, the instance of the node's last heartbeat
// (known: there was one): a second process started with the node's ID,
// or a restarted node's old process. It is not the known node's, and is
// ignored. A leave without an instance (an older node) cannot be told
// apart.
func staleLeave(info NodeInfo, known bool, current string) bool {
	return info.Leaving && known && info.Instance != "" && info.Instance != current
}

// heardNode is what a node knows of another node's liveness. A lost
// node's is kept, so that its return is noticed (handleNodeInfo): the
// records are as many as the node IDs heard.
type heardNode struct {
	instance string
	seen     time.Time // last heartbeat; or when the node was first found in the directory without one
	lost     bool      // seen is older than nodeTTL: its tracks were purged
}

// handleNodeInfo takes another node's heartbeat or leave announcement.
// A leave purges the node's tracks at once, and so does a heartbeat from
// a new instance (the node restarted within nodeTTL: its previous run's
// tracks are gone). A heartbeat from a node that was lost (its heartbeats
// had stopped for nodeTTL: a bus partition, a paused process) asks every
// node to announce its tracks again (subjectSync), since the purge
// removed the node's tracks here and the node does not know it; so does
// a restart's purge that removed tracks, since the new instance's first
// announcements may have come before its heartbeat (the bus hands each
// subscription its messages on a goroutine of its own).
func (n *Node) handleNodeInfo(m *nats.Msg) {
	info, ok := parseNodeInfo(m.Data)
	if !ok || info.ID == n.cfg.ID {
		return
	}
	now := time.Now()
	n.mu.Lock()
	if n.closed {
		n.mu.Unlock()
		return
	}
	old := n.heard[info.ID]
	var current string
	if old != nil {
		current = old.instance
	}
	if info.Leaving {
		// a node known from its tracks alone has no instance to compare
		if staleLeave(info, old != nil && current != "", current) {
			n.mu.Unlock()
			return // the manager logs it
		}
		// A node that comes back announces itself and asks for the tracks
		// (Start), so nothing of it need be remembered.
		delete(n.heard, info.ID)
		n.purgeNode(info.ID, "left")
		return
	}
	back := old != nil && old.lost
	restarted := old != nil && !old.lost && old.instance != "" && info.Instance != "" && info.Instance != old.instance
	n.heard[info.ID] = &heardNode{instance: info.Instance, seen: now}
	if restarted {
		if n.purgeNode(info.ID, "restarted") > 0 {
			_ = n.cfg.NC.Publish(subjectSync, nil)
		}
		return
	}
	n.mu.Unlock()
	if back {
		n.log.Info("sfu node heard again after its heartbeats stopped; asking every node to announce its tracks",
			"node", info.ID, "site", info.Site, "instance", info.Instance, "subject", subjectSync)
		_ = n.cfg.NC.Publish(subjectSync, nil)
	}
}

// expireNodes purges, at now, the tracks of the nodes whose last heartbeat
// is nodeTTL old or older. A node found in the directory without a
// heartbeat heard (its tracks came first, or after its leave) has nodeTTL
// from now to send one.
func (n *Node) expireNodes(now time.Time) {
	n.mu.Lock()
	listed := map[string]bool{} // nodes with tracks in the directory
	for _, t := range n.directory {
		if t.Node == n.cfg.ID || listed[t.Node] {
			continue
		}
		listed[t.Node] = true
		if n.heard[t.Node] == nil {
			n.heard[t.Node] = &heardNode{seen: now}
		}
	}
	gone := map[string]*heardNode{}
	for id, h := range n.heard {
		// a lost node's tracks are purged again if any came back (an
		// announcement that crossed its purge)
		if now.Sub(h.seen) >= nodeTTL && (!h.lost || listed[id]) {
			gone[id] = h
		}
	}
	n.mu.Unlock()
	for id, h := range gone {
		if n.expiring != nil {
			n.expiring(id)
		}
		n.mu.Lock()
		// A heartbeat replaces the record and a leave deletes it: either
		// means the node was heard meanwhile (compared by record, not by
		// time: now may be ahead of the clock, as in tests). The record
		// is marked lost only now, with the purge: marked earlier, it
		// would be found lost by a heartbeat in between, which would log
		// the node heard again and ask for a sync although nothing was
		// purged.
		if n.closed || n.heard[id] != h {
			n.mu.Unlock()
			continue
		}
		h.lost = true
		n.purgeNode(id, "no heartbeat")
	}
}

// purgeNode removes the tracks of node id, which is gone (why), from the
// directory, drops the sources relayed from it (no "unsub" goes to it) and
// closes the link to it; the subscribers' slots that carried its tracks go
// to other tracks. It returns the number of tracks removed. n.mu must be
// held; purgeNode unlocks it.
func (n *Node) purgeNode(id, why string) (tracks int) {
	for key, t := range n.directory {
		if t.Node == id {
			delete(n.directory, key)
			tracks++
		}
	}
	var orphans []*source
	for key, s := range n.relayed {
		if s.info.Node == id {
			delete(n.relayed, key)
			s.cadence.stop()
			orphans = append(orphans, s)
		}
	}
	relayed := len(orphans)
	var link *relay.Link
	if ls := n.links[id]; ls != nil {
		select {
		case <-ls.done:
			link = ls.link
			delete(n.links, id)
		default: // being established: it fails on its own
		}
	}
	peers := n.peerList("")
	n.mu.Unlock()
	n.purged.Add(uint64(tracks))
	if tracks > 0 || relayed > 0 || link != nil || why == "no heartbeat" {
		n.log.Info("sfu node gone; its tracks removed from the directory",
			"node", id, "why", why, "tracks", tracks, "relayed", relayed, "link_closed", link != nil)
	}
	if link != nil {
		link.Close()
	}
	if tracks == 0 && relayed == 0 {
		return 0
	}
	for _, p := range peers {
		if relayed > 0 {
			// the slots fed by the dropped sources are freed before the
			// reallocation: left in them, a track back in the directory
			// by then (the sync after a node is heard again) found its
			// slot already carrying it, on a source nothing fed any more.
			// On a goroutine: the caller may hold (or wait for) the peer.
			go p.dropSources(orphans)
		} else {
			go p.reconcile()
		}
	}
	return tracks
}

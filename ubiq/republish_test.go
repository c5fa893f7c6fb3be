package ubiq

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// TestKNNPositionsReachALaterNode: in a kNN room, a node that takes the
// room up after the members of another node reported their positions
// learns them, even those reaching it before it has read the room's
// interest setting, and ranks them by them. The test fails if positions
// go on the bus only while another node has the room active: the later
// node then knows none of the members that do not move again, and ranks
// them last.
func TestKNNPositionsReachALaterNode(t *testing.T) {
	bucket := fmt.Sprintf("ubiq-republish-%d", bucketSeq.Add(1))
	mod := func(c *Config) { c.Bucket, c.RemoveGrace = bucket, -1 }
	s1, s2 := startServer(t, nil, mod), startServer(t, nil, mod)
	id := newUUID()
	a, n, f := dialPeer(t, s1.tcp), dialPeer(t, s1.tcp), dialPeer(t, s1.tcp)
	a.join(JoinArgs{UUID: id})
	a.request("AppendRoomProperties", PropertiesArgs{Keys: []string{InterestKey}, Values: []string{`{"mode":"knn","k":1,"rate_hz":50,"hysteresis_ms":1}`}})
	a.expect("RoomPropertiesAppended")
	for _, pp := range []struct {
		p   *peer
		pos string
	}{{n, "1,0,0"}, {f, "100,0,0"}} {
		pp.p.join(JoinArgs{UUID: id})
		pp.p.request("AppendPeerProperties", PropertiesArgs{Keys: []string{PositionKey}, Values: []string{pp.pos}})
		eventually(t, "position applied on node 1", func() bool { return positioned(s1, id, pp.p) })
	}

	// Node 2 takes the room up. Node 1 sees its presence key before node 2
	// reads the room's keys: node 1's positions come before node 2 knows
	// that the room uses kNN interest.
	s1.s.mu.Lock()
	r1 := s1.s.rooms[id]
	s1.s.mu.Unlock()
	held := func(key string) error {
		if strings.HasPrefix(key, "r."+id+".n.") {
			eventually(t, "node 1 to see node 2's presence", func() bool { return r1.others.Load() > 0 })
			r1.do(func() {}) // node 1 has published what it does as it sees it
			if err := s1.nc.Flush(); err != nil {
				return err
			}
		}
		return nil
	}
	s2.s.store.afterPut.Store(&held)
	g, q := dialPeer(t, s2.tcp), dialPeer(t, s2.tcp)
	g.join(JoinArgs{UUID: id, Peer: g.info([]string{PositionKey}, []string{"50,0,0"})})
	s2.s.store.afterPut.Store(nil)
	eventually(t, "node 1's positions known on node 2", func() bool { return positioned(s2, id, n) && positioned(s2, id, f) })

	// q, at the origin, keeps its nearest: n on node 1, not g on node 2
	// (whose position node 2 knew, where it knew none of node 1's).
	q.join(JoinArgs{UUID: id, Peer: q.info([]string{PositionKey}, []string{"0,0,0"})})
	known := map[string]bool{}
	deadline := time.After(10 * time.Second)
	for len(known) != 1 || !known[n.uuid] {
		select {
		case m := <-q.in:
			applyPeerEvents(t, known, []msg{m})
		case <-deadline:
			t.Fatalf("q knows %v, want only n %s (g %s, f %s, a %s)", known, n.uuid, g.uuid, f.uuid, a.uuid)
		}
	}
}

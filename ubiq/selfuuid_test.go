package ubiq

import (
	"testing"
)

// A peer that moves to another room takes a new uuid there, and may still
// observe (or, for a moment, be attached as a member of) its old room,
// where its old member key lives until the room's watch sees it deleted.
// A reconcile of the old room in between (its member detach, a policy
// change) must not tell the peer about its own old uuid: it is the peer
// itself, not another peer. The test holds the old room's goroutine until
// the move is done, then runs the queued detach before the watch's
// deletion of the old key, which is the order that showed the peer a
// PeerAdded (and then a PeerRemoved) for itself.
func TestMovedPeerNotToldOfItsOldUUID(t *testing.T) {
	for _, observe := range []bool{true, false} {
		name := "member"
		if observe {
			name = "observer of its old room"
		}
		t.Run(name, func(t *testing.T) {
			ts := startServer(t, nil, func(c *Config) { c.RemoveGrace = -1 })
			a, b := newUUID(), newUUID()
			p := dialPeer(t, ts.tcp)
			old := p.uuid
			p.join(JoinArgs{UUID: a})
			if observe {
				p.request("SetObserved", SetObservedArgs{ClientID: p.clientID, Rooms: []string{a}})
				p.expect("Observed")
			}
			other := dialPeer(t, ts.tcp) // keeps room a active and not empty
			other.join(JoinArgs{UUID: a})
			p.expect("PeerAdded")
			p.barrier()

			r := ts.s.acquireActive(a)
			if r == nil {
				t.Fatal("room a is not active")
			}
			defer ts.s.release(r)
			unblock, done := make(chan struct{}), make(chan struct{})
			r.cmds <- func() {
				defer close(done)
				<-unblock
				// Run the commands queued meanwhile (the detach of p's
				// membership) before the watch's updates, as the loop may.
				for {
					select {
					case f := <-r.cmds:
						if f == nil {
							r.cmds <- nil
							return
						}
						f()
					default:
						return
					}
				}
			}
			p.uuid = newUUID()
			p.join(JoinArgs{UUID: b})
			eventually(t, "p's old member key deleted", func() bool { return countMembers(ts, a) == 1 })
			close(unblock)
			<-done
			// Let the room catch up with its watch.
			r.do(func() {})
			eventually(t, "room a to see p's old key go", func() bool {
				n := 0
				r.do(func() { n = len(r.members) })
				return n == 1
			})
			for _, m := range p.barrier() {
				if m.typ == "PeerAdded" && peerAddedUUID(t, m) == old {
					t.Fatalf("p (now %s) was told PeerAdded for its own old uuid %s", p.uuid[:8], old[:8])
				}
				if m.typ == "PeerRemoved" {
					var rm struct {
						UUID string `json:"uuid"`
					}
					m.decode(t, &rm)
					if rm.UUID == old {
						t.Fatalf("p (now %s) was told PeerRemoved for its own old uuid %s", p.uuid[:8], old[:8])
					}
				}
			}
		})
	}
}

package ubiq

import (
	"fmt"
	"strings"
	"testing"
)

// TestLongPeerUUIDAcrossNodes: a peer's uuid tags its frames and
// positions on the bus with a one-byte length, so it is at most
// MaxPeerUUIDLen (255) bytes, and a Join with a longer one is rejected.
// A longer uuid, cut to 255 bytes on the bus, would name no member on the
// other nodes of a kNN room, and its frames would reach none of their
// members.
func TestLongPeerUUIDAcrossNodes(t *testing.T) {
	bucket := fmt.Sprintf("ubiq-longuuid-%d", bucketSeq.Add(1))
	mod := func(c *Config) { c.Bucket = bucket; c.RemoveGrace = -1 }
	s1, s2 := startServer(t, nil, mod), startServer(t, nil, mod)
	id := newUUID()
	b := dialPeer(t, s2.tcp)
	b.join(JoinArgs{UUID: id})
	b.request("AppendRoomProperties", PropertiesArgs{Keys: []string{InterestKey}, Values: []string{`{"mode":"knn","k":3,"rate_hz":50}`}})
	b.expect("RoomPropertiesAppended")
	b.request("AppendPeerProperties", PropertiesArgs{Keys: []string{PositionKey}, Values: []string{"0,0,0"}})
	eventually(t, "b's position", func() bool { return positioned(s2, id, b) })

	for _, tc := range []struct {
		n  int
		ok bool
	}{{MaxPeerUUIDLen, true}, {MaxPeerUUIDLen + 1, false}} {
		a := dialPeer(t, s1.tcp)
		info := a.info(nil, nil)
		info.UUID = strings.Repeat("u", tc.n)
		a.request("Join", JoinArgs{UUID: id, Peer: info})
		if !tc.ok {
			var rej RejectedArgs
			a.expect("Rejected").decode(t, &rej)
			if want := fmt.Sprintf("peer uuid of %d bytes is longer than the longest, %d", tc.n, MaxPeerUUIDLen); !strings.Contains(rej.Reason, want) {
				t.Fatalf("Rejected %q, want %q", rej.Reason, want)
			}
			continue
		}
		a.expect("SetRoom")
		if got := peerAddedUUID(t, b.expect("PeerAdded")); got != info.UUID {
			t.Fatalf("b told of %q", got)
		}
		eventually(t, "node 2's presence on node 1", func() bool {
			r := s1.s.acquireActive(id)
			if r == nil {
				return false
			}
			defer s1.s.release(r)
			return r.others.Load() > 0
		})
		a.c.Send(NetworkId{A: 7, B: 7}, []byte("pose"))
		if f := b.frame(); string(f.frame[HeaderSize:]) != "pose" {
			t.Fatalf("b got %q", f.frame[HeaderSize:])
		}
	}
}

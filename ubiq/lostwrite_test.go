package ubiq

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/nats-io/nats.go/jetstream"
)

// TestMemberWriteWithLostAnswer: a member key's write that the store
// applied but whose answer was lost (a timeout) leaves no ghost member.
// A Join whose member write so failed is rejected, and the key it wrote
// goes; a member whose property write so failed has its key deleted when
// it leaves (it holds the connection's session), though the connection
// never learned the key's revision. Either key left behind would show the
// others the peer in the room for as long as this node runs.
//
// The other member, p, is told of q added then removed, or of neither: the
// room's watch shows the latest value of each key, and one that lags (on a
// loaded machine) may see q's key only once it is gone.
func TestMemberWriteWithLostAnswer(t *testing.T) {
	for _, tc := range []struct {
		name  string
		write int // which member key write of the peer loses its answer
	}{
		{"join", 1},
		{"property append", 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ts := startServer(t, nil, nil)
			id := newUUID()
			p, q := dialPeer(t, ts.tcp), dialPeer(t, ts.tcp)
			p.join(JoinArgs{UUID: id})
			var writes atomic.Int32
			lose := func(key string) error {
				if strings.Contains(key, ".m."+q.uuid) && writes.Add(1) == int32(tc.write) {
					return errors.New("answer lost (test)")
				}
				return nil
			}
			ts.s.store.afterPut.Store(&lose)
			q.request("Join", JoinArgs{UUID: id, Peer: q.info(nil, nil)})
			if tc.write == 1 {
				q.expect("Rejected")
			} else {
				q.expect("SetRoom")
				q.request("AppendPeerProperties", PropertiesArgs{Keys: []string{"k"}, Values: []string{"v"}})
				q.barrier()
				q.c.Close()
			}
			eventually(t, "q's member key deleted", func() bool {
				_, err := ts.s.kv.Get(context.Background(), memberKey(id, q.uuid))
				return errors.Is(err, jetstream.ErrKeyNotFound)
			})
			// A change of the room's record reaches p after the room's
			// watch has passed the key's deletion.
			p.request("AppendRoomProperties", PropertiesArgs{Keys: []string{"after"}, Values: []string{newUUID()}})
			p.expect("RoomPropertiesAppended")
			told := p.barrier()
			added, removed := 0, 0
			for _, m := range told {
				switch m.typ {
				case "PeerAdded":
					if got := peerAddedUUID(t, m); got != q.uuid {
						t.Fatalf("p told of %s", got)
					}
					added++
				case "PeerRemoved":
					removed++
				}
			}
			if added > 1 || removed > added {
				t.Fatalf("p was told of q added %d times and removed %d times", added, removed)
			}
			if added == 1 && removed == 0 {
				var rm struct {
					UUID string `json:"uuid"`
				}
				p.expect("PeerRemoved").decode(t, &rm)
				if rm.UUID != q.uuid {
					t.Fatalf("PeerRemoved %s, want %s", rm.UUID, q.uuid)
				}
			}
		})
	}
}

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
// it leaves (it holds the connection's session). Before, the first key
// stayed (nothing deleted it), and the second was taken for another
// connection's (its revision was not the one the connection knew): the
// others saw the peer in the room for as long as this node ran.
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
			if got := peerAddedUUID(t, p.expect("PeerAdded")); got != q.uuid {
				t.Fatalf("p told of %s", got)
			}
			var rm struct {
				UUID string `json:"uuid"`
			}
			p.expect("PeerRemoved").decode(t, &rm)
			if rm.UUID != q.uuid {
				t.Fatalf("PeerRemoved %s, want %s", rm.UUID, q.uuid)
			}
			if _, err := ts.s.kv.Get(context.Background(), memberKey(id, q.uuid)); !errors.Is(err, jetstream.ErrKeyNotFound) {
				t.Fatalf("member key of %s: %v, want gone", q.uuid, err)
			}
		})
	}
}

package ubiq

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/nats-io/nats.go/jetstream"
)

// TestPresenceWriteWithLostAnswer: a room's activation whose presence key
// was written but whose answer was lost (putOwned failed after the key's
// index entry was written) deletes the key and its index entry, and the
// room, which nobody holds, goes. Left in place, both keys would stay
// while the node runs: the other nodes would take the room for active here
// (relaying its frames here, never removing it), and each such activation
// would leave an index entry.
func TestPresenceWriteWithLostAnswer(t *testing.T) {
	ts := startServer(t, nil, nil)
	id := newUUID()
	lose := func(key string) error {
		if strings.HasPrefix(key, "r."+id+".n.") {
			return errors.New("answer lost (test)")
		}
		return nil
	}
	ts.s.store.afterPut.Store(&lose)
	p := dialPeer(t, ts.tcp)
	p.request("Join", JoinArgs{UUID: id, Peer: p.info(nil, nil)})
	p.expect("Rejected")
	ts.s.store.afterPut.Store(nil)

	ctx := context.Background()
	eventually(t, "the presence key and its index entry deleted", func() bool {
		keys, err := ts.s.store.listKeys(ctx, "r."+id+".n.*", ownedKey(ts.s.node, "r."+id+".>"))
		return err == nil && len(keys) == 0
	})
	eventually(t, "the room removed", func() bool {
		_, _, err := ts.s.store.getRoom(ctx, id)
		return errors.Is(err, jetstream.ErrKeyNotFound)
	})
}

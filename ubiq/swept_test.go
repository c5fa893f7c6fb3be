package ubiq

import (
	"context"
	"testing"
	"time"
)

// TestMemberKeyRemovedUnderConnection: a member whose key another node
// deletes while it is connected (that node took this one for dead: its
// heartbeat writes failed for NodeTimeout, and it swept its keys) is
// disconnected, so that it reconnects and joins again: left connected, it
// would be in the room as far as it knew, while the others were told it
// was removed, and nobody would see it again while its connection lasted.
func TestMemberKeyRemovedUnderConnection(t *testing.T) {
	ts := startServer(t, nil, nil)
	id := newUUID()
	p, q := dialPeer(t, ts.tcp), dialPeer(t, ts.tcp)
	p.join(JoinArgs{UUID: id})
	q.join(JoinArgs{UUID: id})
	p.expect("PeerAdded")
	if err := ts.s.kv.Delete(context.Background(), memberKey(id, p.uuid)); err != nil { // as a sweep does
		t.Fatal(err)
	}
	q.expect("PeerRemoved")
	select {
	case <-p.c.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("a member whose key was removed under it is still connected")
	}
	// q, whose key stays, stays.
	q.barrier()
}

package ubiq

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// holdPresenceWrite makes the next writes of room r's presence key on ts
// wait, between the key's index entry and the key, until the returned
// release is called (or the test ends), and returns a channel that
// receives the key when one waits. It then deletes the key, as a sweep of
// this node does, so that the room writes it again (announceAgain), and
// waits for that write.
func holdPresenceWrite(t *testing.T, ts *testServer, r *room) (release func()) {
	t.Helper()
	key := presenceKey(r.id, r.self)
	entered, hold := make(chan struct{}, 1), make(chan struct{})
	var released bool
	release = func() {
		if !released {
			released = true
			close(hold)
		}
	}
	t.Cleanup(release) // before the server's shutdown
	wait := func(k string) {
		if k != key {
			return
		}
		select {
		case entered <- struct{}{}:
		default:
		}
		<-hold
	}
	ts.s.store.afterIndex.Store(&wait)
	t.Cleanup(func() { ts.s.store.afterIndex.Store(nil) })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := ts.s.kv.Delete(ctx, key); err != nil {
		t.Fatal(err)
	}
	select {
	case <-entered:
	case <-ctx.Done():
		t.Fatal("the room did not write its presence key again after it was deleted")
	}
	return release
}

// TestPresenceRewriteDoesNotHoldTheRoom: while a room writes its presence
// key again (another node swept it) and the store does not answer, the
// room goes on serving its connections: a peer joins it, the member there
// is told, and frames go both ways between them. Before, the room's
// goroutine made the write itself, and everything it does (a join's
// attachment, PeerAdded, property changes) waited for up to the request
// timeout.
func TestPresenceRewriteDoesNotHoldTheRoom(t *testing.T) {
	ts := startServer(t, nil, nil)
	id := newUUID()
	a, b := dialPeer(t, ts.tcp), dialPeer(t, ts.tcp)
	a.join(JoinArgs{UUID: id})
	ts.s.mu.Lock()
	r := ts.s.rooms[id]
	ts.s.mu.Unlock()
	holdPresenceWrite(t, ts, r)

	b.join(JoinArgs{UUID: id})
	if got := peerAddedUUID(t, a.expect("PeerAdded")); got != b.uuid {
		t.Fatalf("a told of %s, want b %s", got, b.uuid)
	}
	b.c.Send(NetworkId{A: 5, B: 6}, []byte("from b"))
	if f := a.frame(); string(f.frame[HeaderSize:]) != "from b" {
		t.Fatalf("a got %q", f.frame[HeaderSize:])
	}
	a.c.Send(NetworkId{A: 5, B: 6}, []byte("from a"))
	if f := b.frame(); string(f.frame[HeaderSize:]) != "from a" {
		t.Fatalf("b got %q", f.frame[HeaderSize:])
	}
}

// TestPresenceRewriteEndsWithTheRoom: a presence key's rewrite under way
// when the room stops (its last member left) does not land after the
// room deleted the key: once the room has stopped, neither the key nor
// its index entry is there. A key written after would hold the room on
// this node for the other nodes (relaying its frames here, never
// removing it) for as long as the node runs.
func TestPresenceRewriteEndsWithTheRoom(t *testing.T) {
	ts := startServer(t, nil, nil)
	id := newUUID()
	a := dialPeer(t, ts.tcp)
	a.join(JoinArgs{UUID: id})
	ts.s.mu.Lock()
	r := ts.s.rooms[id]
	ts.s.mu.Unlock()
	release := holdPresenceWrite(t, ts, r)

	a.c.Close()
	eventually(t, "the room stopping on this node", func() bool { return !ts.s.active(id) })
	release()
	select {
	case <-r.gone:
	case <-time.After(10 * time.Second):
		t.Fatal("the room did not stop")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	key := presenceKey(id, r.self)
	for _, k := range []string{key, ownedKey(ts.s.node, key)} {
		if _, err := ts.s.kv.Get(ctx, k); !errors.Is(err, jetstream.ErrKeyNotFound) {
			t.Errorf("%s after the room stopped: %v, want it gone", k, err)
		}
	}
}

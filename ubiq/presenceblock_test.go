package ubiq

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// holdPresenceWrite makes the next writes of room r's presence key on ts
// wait, between the key's index entry and the key, until the returned
// release is called (or the test ends). It then deletes the key, as a
// sweep of this node does, so that the room writes it again
// (announceAgain), and waits for that write.
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
// key again (another node swept it) and the store does not answer (the
// write is held for the whole test), the room goes on serving its
// connections: a peer joins it, the member there is told, and frames go
// both ways between them. Nothing the room's goroutine does (a join's
// attachment, PeerAdded, property changes) waits for the write.
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
//
// The key's write is held after the room's write checked its context, as
// one on its way to the store when the room cancels it, which the store
// applies all the same: the room must wait for it before it deletes the
// key. Once the room has canceled it, the write lands when the room
// deletes the key, or after presenceGrace if it does not: a room that
// waits for the write deletes nothing until the write has landed. The
// grace only gives a room that does not wait the time to delete its key
// first (it does so at once); a room that waits passes whatever it is.
func TestPresenceRewriteEndsWithTheRoom(t *testing.T) {
	const presenceGrace = 250 * time.Millisecond
	ts, hook, raw := startHookedServer(t)
	id := newUUID()
	a := dialPeer(t, ts.tcp)
	a.join(JoinArgs{UUID: id})
	r := roomOf(ts, id)
	key := presenceKey(id, r.self)
	entered, deleted, landed := make(chan struct{}), make(chan struct{}), make(chan struct{})
	var held, gone atomic.Bool
	setHook(hook, func(ctx context.Context, w kvWrite) (uint64, error) {
		switch {
		case w.op == "delete" && w.key == key:
			rev, err := w.write(ctx)
			if gone.CompareAndSwap(false, true) {
				close(deleted)
			}
			return rev, err
		case w.op != "put" || w.key != key || !held.CompareAndSwap(false, true):
			return w.write(ctx)
		}
		close(entered)
		<-ctx.Done() // the room stops
		grace := time.NewTimer(presenceGrace)
		defer grace.Stop()
		select {
		case <-deleted:
		case <-grace.C:
		}
		defer close(landed)
		return w.write(context.WithoutCancel(ctx)) // sent before the cancel
	})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := raw.Delete(ctx, key); err != nil { // as a sweep of this node does
		t.Fatal(err)
	}
	select {
	case <-entered:
	case <-ctx.Done():
		t.Fatal("the room did not write its presence key again after it was deleted")
	}

	a.c.Close()
	select {
	case <-r.gone:
	case <-ctx.Done():
		t.Fatal("the room did not stop")
	}
	select {
	case <-landed:
	case <-ctx.Done():
		t.Fatal("the presence key's write did not land")
	}
	for _, k := range []string{key, ownedKey(ts.s.node, key)} {
		if _, err := raw.Get(ctx, k); !errors.Is(err, jetstream.ErrKeyNotFound) {
			t.Errorf("%s after the room stopped: %v, want it gone", k, err)
		}
	}
}

package ubiq

import (
	"testing"
	"time"
)

// TestRewatchDoesNotHoldTheRoom: while a room's new key watch is being
// started (its creation waits on the bus, as it does while the bus is
// down), the room goes on serving its local connections: an observer is
// attached and answered, and a member's frames reach it. The test fails
// if the room's goroutine makes the watch itself: everything it does (a
// SetObserved, which waits for it, a member leaving, a kNN recompute) then
// waits for up to the bus's request timeout, each time the watch is
// retried.
func TestRewatchDoesNotHoldTheRoom(t *testing.T) {
	s1 := startServer(t, nil, nil)
	entered, hold := make(chan string, 1), make(chan struct{})
	s1.s.beforeRewatch = func(room string) { entered <- room; <-hold }
	t.Cleanup(func() { close(hold) }) // before the server's shutdown

	id := newUUID()
	a, o := dialPeer(t, s1.tcp), dialPeer(t, s1.tcp)
	a.join(JoinArgs{UUID: id})
	s1.s.mu.Lock()
	r := s1.s.rooms[id]
	s1.s.mu.Unlock()
	r.do(func() { r.watcher.Stop() })
	select {
	case <-entered:
	case <-time.After(10 * time.Second):
		t.Fatal("the room did not watch again after its watch ended")
	}

	// The watch's start is held: o observes the room.
	o.request("SetObserved", SetObservedArgs{ClientID: o.clientID, Rooms: []string{id}})
	o.expect("Observed")
	a.c.Send(NetworkId{A: 3, B: 4}, []byte("while the watch starts"))
	if f := o.frame(); string(f.frame[HeaderSize:]) != "while the watch starts" {
		t.Fatalf("o got %q", f.frame[HeaderSize:])
	}
}

package ubiq

import (
	"sync"
	"testing"
)

// holdLeaving holds the stopping goroutines of ts's rooms before they
// delete their presence keys, as a slow store would, until the returned
// function is called.
func holdLeaving(t *testing.T, ts *testServer) func() {
	hold := make(chan struct{})
	var once sync.Once
	release := func() { once.Do(func() { close(hold) }) }
	t.Cleanup(release)
	ts.s.beforeLeave = func(string) { <-hold }
	return release
}

// A peer below its bound of rooms let go of does not wait for them to
// stop: SetObserved and Join are answered while the rooms they left are
// still stopping (their goroutines held here, as a slow store would hold
// their presence key's deletion). The test fails if a room switch waits
// for the rooms left to stop, up to requestTimeout each.
func TestRoomSwitchDoesNotWaitForStop(t *testing.T) {
	ts := startServer(t, nil, nil)
	release := holdLeaving(t, ts)
	p := dialPeer(t, ts.tcp)
	observed := newUUID()
	p.request("SetObserved", SetObservedArgs{ClientID: p.clientID, Rooms: []string{observed}})
	p.expect("Observed")
	p.request("SetObserved", SetObservedArgs{ClientID: p.clientID, Rooms: []string{}})
	p.expect("Observed")

	first := p.join(JoinArgs{Name: "first"})
	if second := p.join(JoinArgs{Name: "second"}); second.UUID == first.UUID {
		t.Fatalf("joined %s again", second.UUID)
	}
	release()
	eventually(t, "the rooms left stopped and cleaned up", func() bool { return ts.s.cleanups.idle() && !ts.s.active(observed) && !ts.s.active(first.UUID) })
}

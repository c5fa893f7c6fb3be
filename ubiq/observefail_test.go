package ubiq

import (
	"context"
	"errors"
	"strconv"
	"testing"

	"github.com/nats-io/nats.go/jetstream"
)

// TestFailedObserveLeavesNoRoom: a SetObserved that created a room's
// record but could not take the room up (its presence key refused) asks
// for the room's removal, as a failed Join does: nobody holds the room, so
// otherwise nobody would remove its record from the store.
func TestFailedObserveLeavesNoRoom(t *testing.T) {
	ts := startServer(t, nil, nil)
	gate := make(chan struct{})
	ts.s.cleanups.before = func(string) { <-gate }
	ctx := context.Background()
	id := newUUID()
	// The room's next presence key exists already, and the store refuses
	// rewrites: its activation fails.
	next := ts.s.node + "-" + strconv.FormatUint(ts.s.activations.Load()+1, 10)
	if _, err := ts.s.kv.Put(ctx, presenceKey(id, next), []byte("in the way")); err != nil {
		t.Fatal(err)
	}
	refuseRewrites(t, ts, true)
	p := dialPeer(t, ts.tcp)
	p.request("SetObserved", SetObservedArgs{ClientID: p.clientID, Rooms: []string{id}})
	var a ObservedArgs
	p.expect("Observed").decode(t, &a)
	if len(a.Rooms) != 0 {
		t.Fatalf("observing %v, want none (the room could not be taken up)", a.Rooms)
	}
	if _, _, err := ts.s.store.getRoom(ctx, id); err != nil {
		t.Fatalf("the room's record was not created: %v", err)
	}
	refuseRewrites(t, ts, false)
	close(gate)
	eventually(t, "the room's record removed", func() bool {
		_, _, err := ts.s.store.getRoom(ctx, id)
		return errors.Is(err, jetstream.ErrKeyNotFound)
	})
}

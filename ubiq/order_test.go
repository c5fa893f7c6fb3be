package ubiq

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"
)

// A room's writes are done in order: while one of its writes waits for a
// retry (here a write that the store keeps refusing, standing for a
// member key's deletion that failed), a departure's count-out is queued
// behind it, not done at once. Counted out inline, the last member out
// would free the join code while the member's key was still there, a
// ghost member in a room without a code.
func TestDepartureWritesRetriedInOrder(t *testing.T) {
	ts := startServer(t, nil, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	p := dialPeer(t, ts.tcp)
	ri := p.join(JoinArgs{Name: "in order", Publish: true})

	var refused atomic.Bool
	refused.Store(true)
	var tries atomic.Int32
	ts.s.retry.add("an earlier write of the room", ri.UUID, errors.New("store refused it"), func(context.Context) error {
		tries.Add(1)
		if refused.Load() {
			return errors.New("store refused it")
		}
		return nil
	})
	p.c.Close()
	// The count-out waits behind it.
	eventually(t, "the count-out queued behind the room's write", func() bool { return ts.s.retry.pending() == 2 })
	eventually(t, "the waiting write retried", func() bool { return tries.Load() >= 2 })
	r, _, err := ts.s.store.getRoom(ctx, ri.UUID)
	if err != nil {
		t.Fatal(err)
	}
	if r.JoinCode != ri.JoinCode || len(r.Joined[ts.s.node]) != 1 {
		t.Fatalf("while an earlier write of room %s waits: join code %q, claims %v; want code %q and the leaver's claim (counted out only after it)", ri.UUID, r.JoinCode, r.Joined, ri.JoinCode)
	}
	refused.Store(false)
	eventually(t, "the writes done in order, the code freed and the room removed", func() bool {
		_, _, err := ts.s.store.getRoom(ctx, ri.UUID)
		return ts.s.retry.pending() == 0 && codesInUse(t, ts) == 0 && err != nil
	})
}

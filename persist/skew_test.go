package persist

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// TestExpiryAskedEarlyByAnotherNode: in a cluster, a node whose clock is a
// little ahead of the applier's asks for an expiry that the applier does
// not grant yet (by its clock the object has not expired). The applier's
// own node asks when its clock gets there, and that request must not be
// dropped as a duplicate of the first. Before, the message id named only
// key and revision, and the object stayed (shown to clients, its delete
// never sent) for the stream's duplicate window, 2 minutes.
func TestExpiryAskedEarlyByAnotherNode(t *testing.T) {
	e, clk := newClockEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	other, err := Open(ctx, Config{JS: e.js, NC: e.nc, Replicas: 1}) // another node's store; not run
	if err != nil {
		t.Fatal(err)
	}
	ahead := newTestClock()
	other.now = ahead.Now

	e.pub(tp+"tmp", `{"object_id":"tmp","action":"create","persist":true,"ttl":10,"data":{}}`)
	e.waitObject("ns", "sc", "tmp", nil)
	key := objectKey("ns", "sc", "tmp")
	clk.Advance(10*time.Second - time.Millisecond)
	ahead.Advance(10 * time.Second) // 1 ms ahead of the applier's clock
	if err := other.expire(ctx, key); err != nil {
		t.Fatal(err)
	}
	e.barrier("ns", "sc") // the applier took the request, and refused it
	if _, err := e.store.kv.Get(ctx, key); err != nil {
		t.Fatalf("tmp was removed before its time by the applier's clock: %v", err)
	}
	clk.Advance(time.Millisecond) // expired by the applier's clock too
	eventually(t, "the removal of expired tmp from the bucket", func() bool {
		_, err := e.store.kv.Get(ctx5s(t), key)
		return errors.Is(err, jetstream.ErrKeyNotFound)
	})
}

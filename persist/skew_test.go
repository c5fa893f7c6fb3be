package persist

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// TestExpiryAskedEarlyByAnotherNode: in a cluster, a node whose clock is a
// little ahead of the applier's asks for an expiry first. The applier
// grants it (the object expires within expirySkew by its own clock): the
// stream keeps one request per key and revision, whichever node sent it,
// so a refused request would not be asked again for the stream's
// duplicate window (2 minutes), and the object would stay shown to
// clients that long.
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
	eventually(t, "the removal of expired tmp from the bucket", func() bool {
		_, err := e.store.kv.Get(ctx5s(t), key)
		return errors.Is(err, jetstream.ErrKeyNotFound)
	})
}

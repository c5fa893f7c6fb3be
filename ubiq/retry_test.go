package ubiq

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// refuseRewrites makes the stream of ts's bucket refuse, or take again,
// every write to a key that holds a value (discard new per subject, with
// one message kept per key): updates and deletions of existing keys fail
// with a JetStream error, as they do while the store is unreachable.
func refuseRewrites(t *testing.T, ts *testServer, refuse bool) {
	t.Helper()
	updateBucketStream(t, ts, fmt.Sprintf("discard new per subject %v", refuse), func(c *jetstream.StreamConfig) { c.DiscardNewPerSubject = refuse })
}

// updateBucketStream changes the configuration of the stream of ts's
// bucket with change; what says what the change is, for the error.
func updateBucketStream(t *testing.T, ts *testServer, what string, change func(*jetstream.StreamConfig)) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := ts.s.cfg.JS.Stream(ctx, "KV_"+ts.s.cfg.Bucket)
	if err != nil {
		t.Fatal(err)
	}
	cfg := st.CachedInfo().Config
	change(&cfg)
	if _, err := ts.s.cfg.JS.UpdateStream(ctx, cfg); err != nil {
		t.Fatalf("update stream %s (%s): %v", cfg.Name, what, err)
	}
}

// A peer leaves its room while the store refuses the writes of its
// departure: its member key's deletion, its count-out of the room (which
// would free the join code) and the room's presence key's deletion all
// fail. Once the store takes writes again, the room's join code is freed
// and the empty room is removed. (The test fails if the node only logs
// the failure and keeps the count: the room then holds its join code, and
// its record, until the node stops.)
func TestFailedDepartureIsRetried(t *testing.T) {
	ts := startServer(t, nil, nil)
	p := dialPeer(t, ts.tcp)
	ri := p.join(JoinArgs{Name: "retry", Publish: true})
	if n := codesInUse(t, ts); n != 1 {
		t.Fatalf("%d join codes reserved, want 1 (room %s)", n, ri.UUID)
	}
	refuseRewrites(t, ts, true)
	p.c.Close()
	// member key, count-out, presence key
	eventually(t, "three departure writes waiting for a retry", func() bool { return ts.s.retry.pending() == 3 })
	if n := codesInUse(t, ts); n != 1 {
		t.Fatalf("while the store refuses writes: %d join codes reserved, want 1", n)
	}
	refuseRewrites(t, ts, false)
	eventually(t, "the departure retried, the join code freed and the room removed", func() bool {
		_, _, err := ts.s.store.getRoom(context.Background(), ri.UUID)
		return ts.s.retry.pending() == 0 && codesInUse(t, ts) == 0 && errors.Is(err, jetstream.ErrKeyNotFound)
	})
	keys, err := ts.s.store.listKeys(context.Background(), "r."+ri.UUID+".>")
	if err != nil || len(keys) != 0 {
		t.Fatalf("keys of removed room %s left: %v (err %v)", ri.UUID, keys, err)
	}
	// The code works for a new room again: a join by it finds nothing.
	q := dialPeer(t, ts.tcp)
	q.request("Join", JoinArgs{JoinCode: ri.JoinCode, Peer: q.info(nil, nil)})
	q.expect("Rejected")
}

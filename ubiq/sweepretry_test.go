package ubiq

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// refuseRollups makes the stream of ts's bucket refuse, or take again,
// purges (a key-value purge is a rollup of the key's subject); other
// writes go on.
func refuseRollups(t *testing.T, ts *testServer, refuse bool) {
	t.Helper()
	updateBucketStream(t, ts, fmt.Sprintf("allow rollup %v", !refuse), func(c *jetstream.StreamConfig) { c.AllowRollup = !refuse })
}

// A node dies while the store refuses rewrites: the surviving node's
// sweep cannot delete the dead node's member and presence keys, count it
// out of its room (which would free the room's join code) or delete its
// heartbeat. Once the store takes writes again, the sweep's writes are
// retried: the keys go, the join code is freed and the empty room is
// removed. (Were the failures ignored, and the index entries deleted even
// when their keys were not, the room would keep the dead node's member,
// and its join code, for good.)
func TestFailedSweepIsRetried(t *testing.T) {
	bucket := fmt.Sprintf("ubiq-sweep-%d", bucketSeq.Add(1))
	const hb, timeout = 100 * time.Millisecond, 600 * time.Millisecond
	mod := func(c *Config) { c.Bucket, c.NodeHeartbeat, c.NodeTimeout = bucket, hb, timeout }
	s1, s2 := startServer(t, nil, mod), startServer(t, nil, mod)
	b := dialPeer(t, s2.tcp)
	ri := b.join(JoinArgs{Name: "sweep", Publish: true})
	if n := codesInUse(t, s1); n != 1 {
		t.Fatalf("%d join codes reserved, want 1 (room %s)", n, ri.UUID)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	nodeKeys := func() []string {
		keys, err := s1.s.store.listKeys(ctx, "e.>", "h.>", "r."+ri.UUID+".>")
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, k := range keys {
			if strings.Contains(k, s2.s.node) || strings.Contains(k, ".m.") {
				out = append(out, k)
			}
		}
		return out
	}

	refuseRewrites(t, s1, true)
	s2.nc.Close() // node 2 dies: neither its departures nor its heartbeats reach the bus
	b.c.Close()
	// member key, presence key, count-out, heartbeat
	eventually(t, "the sweep's writes waiting for a retry", func() bool { return s1.s.retry.pending() >= 4 })
	if n := codesInUse(t, s1); n != 1 {
		t.Fatalf("while the store refuses writes: %d join codes reserved, want 1", n)
	}
	if keys := nodeKeys(); len(keys) == 0 {
		t.Fatal("the dead node's keys went while the store refused writes")
	}

	refuseRewrites(t, s1, false)
	eventually(t, "the sweep retried, the join code freed and the room removed", func() bool {
		_, _, err := s1.s.store.getRoom(ctx, ri.UUID)
		return s1.s.retry.pending() == 0 && codesInUse(t, s1) == 0 && errors.Is(err, jetstream.ErrKeyNotFound)
	})
	if keys := nodeKeys(); len(keys) != 0 {
		t.Fatalf("keys of the dead node left: %v", keys)
	}
}

// A room is removed while the store refuses purges: its record goes, but
// its blobs, their count and its join code's key stay. Once the store
// takes purges again, they are retried and go.
func TestFailedBlobPurgeIsRetried(t *testing.T) {
	ts := startServer(t, nil, nil)
	p := dialPeer(t, ts.tcp)
	ri := p.join(JoinArgs{Name: "blobs"})
	p.request("SetBlob", SetBlobArgs{UUID: "b1", Blob: "one"})
	p.request("SetBlob", SetBlobArgs{UUID: "b2", Blob: "two"})
	p.request("GetBlob", GetBlobArgs{ClientID: p.clientID, UUID: "b2"})
	p.expect("Blob")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	blobKeys := func() []string {
		keys, err := ts.s.store.listKeys(ctx, "b."+ri.UUID+".*", blobBytesKey(ri.UUID))
		if err != nil {
			t.Fatal(err)
		}
		return keys
	}
	if keys := blobKeys(); len(keys) != 3 {
		t.Fatalf("blob keys %v, want two blobs and their count", keys)
	}

	refuseRollups(t, ts, true)
	p.c.Close()
	eventually(t, "the room removed and its purges waiting for a retry", func() bool {
		_, _, err := ts.s.store.getRoom(ctx, ri.UUID)
		return errors.Is(err, jetstream.ErrKeyNotFound) && ts.s.retry.pending() == 2 // blobs, join code
	})
	if keys := blobKeys(); len(keys) != 3 {
		t.Fatalf("blob keys %v while the store refuses purges, want all three", keys)
	}

	refuseRollups(t, ts, false)
	eventually(t, "the blobs, their count and the join code gone", func() bool {
		return ts.s.retry.pending() == 0 && len(blobKeys()) == 0 && codesInUse(t, ts) == 0
	})
}

// purgeBlobs leaves the blobs of a room that was created again, with
// their count: they may be its new members'.
func TestPurgeBlobsOfRoomCreatedAgain(t *testing.T) {
	ts := startServer(t, nil, nil)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	st, room := ts.s.store, newUUID()
	if err := st.setBlob(ctx, room, "b", "blob", 1<<20); err != nil {
		t.Fatal(err)
	}
	count := func() int {
		keys, err := st.listKeys(ctx, "b."+room+".*", blobBytesKey(room))
		if err != nil {
			t.Fatal(err)
		}
		return len(keys)
	}
	if err := st.observeRoom(ctx, room); err != nil {
		t.Fatal(err)
	}
	if err := st.purgeBlobs(ctx, room); err != nil {
		t.Fatal(err)
	}
	if n := count(); n != 2 {
		t.Fatalf("%d blob keys of a room that exists, want 2 (its blob and their count)", n)
	}
	if err := st.kv.Delete(ctx, infoKey(room)); err != nil {
		t.Fatal(err)
	}
	if err := st.purgeBlobs(ctx, room); err != nil {
		t.Fatal(err)
	}
	if n := count(); n != 0 {
		t.Fatalf("%d blob keys of a removed room, want none", n)
	}
}

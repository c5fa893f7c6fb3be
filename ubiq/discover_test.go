package ubiq

import (
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"
)

// discoverAll asks p for the published rooms and returns their uuids,
// sorted.
func discoverAll(t *testing.T, p *peer) []string {
	t.Helper()
	p.request("DiscoverRooms", DiscoverArgs{ClientID: p.clientID})
	return roomUUIDs(t, p.expect("Rooms"))
}

func roomUUIDs(t *testing.T, m msg) []string {
	t.Helper()
	var rooms RoomsArgs
	m.decode(t, &rooms)
	out := []string{}
	for _, r := range rooms.Rooms {
		out = append(out, r.UUID)
	}
	slices.Sort(out)
	return out
}

// TestDiscoverRoomsScansBounded: peers on several connections ask for the
// published rooms as fast as they can. Each request read every room's
// record from the store (a key listing and a read per room); now a node
// scans them at most once per discoverEvery, one scan at a time, and
// every answer is still exact for the rooms of this node: the node's own
// record writes (a join, a leave, a new published room) update its
// listing at once. A room published on another node is listed within
// discoverEvery.
func TestDiscoverRoomsScansBounded(t *testing.T) {
	const rooms, askers, asks = 8, 4, 50
	bucket := fmt.Sprintf("ubiq-discover-%d", bucketSeq.Add(1))
	mod := func(c *Config) { c.Bucket = bucket }
	ts := startServer(t, nil, mod)
	var want []string
	for i := range rooms {
		m := dialPeer(t, ts.tcp)
		want = append(want, m.join(JoinArgs{Name: fmt.Sprintf("room %d", i), Publish: i%2 == 0}).UUID)
	}
	// Only the published ones are listed.
	var pub []string
	for i, id := range want {
		if i%2 == 0 {
			pub = append(pub, id)
		}
	}
	slices.Sort(pub)

	start := time.Now()
	var wg sync.WaitGroup
	errs := make(chan string, askers*asks)
	for range askers {
		p := dialPeer(t, ts.tcp)
		wg.Go(func() {
			for range asks {
				p.request("DiscoverRooms", DiscoverArgs{ClientID: p.clientID})
			}
			for range asks {
				if got := roomUUIDs(t, p.expect("Rooms")); !slices.Equal(got, pub) {
					errs <- fmt.Sprintf("listed %v, want %v", got, pub)
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Fatal(e)
	}
	ts.s.listing.mu.Lock()
	scans := ts.s.listing.scans
	ts.s.listing.mu.Unlock()
	if limit := 1 + int(time.Since(start)/discoverEvery); scans > limit {
		t.Fatalf("%d scans of the rooms for %d DiscoverRooms in %v, want at most %d (one per %v)", scans, askers*asks, time.Since(start), limit, discoverEvery)
	}

	t.Logf("%d scans for %d DiscoverRooms in %v", scans, askers*asks, time.Since(start))
	// This node's changes are listed at once: a new published room, and a
	// room whose last member left is not listed.
	q := dialPeer(t, ts.tcp)
	fresh := dialPeer(t, ts.tcp).join(JoinArgs{Name: "fresh", Publish: true}).UUID
	if got := discoverAll(t, q); !slices.Contains(got, fresh) {
		t.Fatalf("listed %v, without the room %s just published", got, fresh)
	}
	leaver := dialPeer(t, ts.tcp)
	gone := leaver.join(JoinArgs{Name: "gone", Publish: true}).UUID
	leaver.c.Close()
	eventually(t, "the room left listed no more", func() bool { return !slices.Contains(discoverAll(t, q), gone) })

	// Another node's room is listed within discoverEvery.
	ts2 := startServer(t, nil, mod)
	other := dialPeer(t, ts2.tcp).join(JoinArgs{Name: "other node", Publish: true}).UUID
	eventually(t, "the other node's room listed", func() bool { return slices.Contains(discoverAll(t, q), other) })
}

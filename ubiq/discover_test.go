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
// scans them at most once per roomListing.every (here an hour: once), one
// scan at a time, and every answer is still exact for the rooms of this
// node: the node's own record writes (a join, a leave, a new published
// room) update its listing at once, with no scan to make up for them. A
// room published on another node is listed once the listing is scanned
// again.
func TestDiscoverRoomsScansBounded(t *testing.T) {
	const rooms, askers, asks = 8, 4, 50
	bucket := fmt.Sprintf("ubiq-discover-%d", bucketSeq.Add(1))
	mod := func(c *Config) { c.Bucket = bucket }
	ts := startServer(t, nil, mod)
	every := func(d time.Duration) {
		ts.s.listing.mu.Lock()
		ts.s.listing.every = d
		ts.s.listing.mu.Unlock()
	}
	every(time.Hour)
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
	if scans != 1 {
		t.Fatalf("%d scans of the rooms for %d DiscoverRooms in %v, want 1 (one per hour)", scans, askers*asks, time.Since(start))
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
	// (The leave is done by the server after the close, but no scan
	// comes meanwhile: only this node's record write can take it out.)
	eventually(t, "the room left listed no more", func() bool { return !slices.Contains(discoverAll(t, q), gone) })
	ts.s.listing.mu.Lock()
	scans = ts.s.listing.scans
	ts.s.listing.mu.Unlock()
	if scans != 1 {
		t.Fatalf("%d scans of the rooms, want 1 (one per hour)", scans)
	}

	// Another node's room is listed once the listing is scanned again.
	ts2 := startServer(t, nil, mod)
	other := dialPeer(t, ts2.tcp).join(JoinArgs{Name: "other node", Publish: true}).UUID
	if got := discoverAll(t, q); slices.Contains(got, other) {
		t.Fatalf("listed %v, with the other node's room %s before a scan", got, other)
	}
	every(0)
	if got := discoverAll(t, q); !slices.Contains(got, other) {
		t.Fatalf("listed %v after a scan, without the other node's room %s", got, other)
	}
}

// A node's record writes may report to the listing out of order (two
// requests' writes of one room): an older revision never replaces a newer
// one, and a removed room is not brought back by a write reported late.
func TestListingKeepsNewestRevision(t *testing.T) {
	l := &roomListing{rooms: map[string]listed{}, at: time.Now(), every: time.Hour}
	id := newUUID()
	pub := func(code string) *roomRecord {
		return &roomRecord{UUID: id, JoinCode: code, Publish: true, Name: "r"}
	}
	steps := []struct {
		rec  *roomRecord
		rev  uint64
		want []string // join codes listed
	}{
		{pub("abc"), 5, []string{"abc"}},
		{pub(""), 7, nil},    // last member out
		{pub("abc"), 6, nil}, // older, reported late
		{pub("xyz"), 9, []string{"xyz"}},
		{nil, 9, nil},                     // removed at 9
		{pub("xyz"), 9, nil},              // the removed record, reported late
		{pub("new"), 12, []string{"new"}}, // created again
	}
	for i, st := range steps {
		l.record(id, st.rec, st.rev)
		var got []string
		for _, r := range l.list() {
			got = append(got, r.JoinCode)
		}
		if !slices.Equal(got, st.want) {
			t.Fatalf("step %d (revision %d): listed codes %v, want %v", i, st.rev, got, st.want)
		}
	}
}

// TestListingDoesNotGrowUnasked: the listing of published rooms keeps
// the record writes of this node only while it is fresh; once it is older
// than a rescan's period, the next DiscoverRooms scans afresh anyway, so
// it is dropped. The test fails if it takes every room this node writes,
// removed ones too, for as long as nobody asks: a node whose peers create
// rooms (a Join without a uuid, again and again) would grow it without
// bound.
func TestListingDoesNotGrowUnasked(t *testing.T) {
	ts := startServer(t, nil, nil)
	q := dialPeer(t, ts.tcp)
	discoverAll(t, q) // scanned once
	l := &ts.s.listing
	l.mu.Lock()
	l.at = time.Now().Add(-time.Hour) // as if it were an hour ago
	l.mu.Unlock()
	p := dialPeer(t, ts.tcp)
	var last string
	for range 50 {
		last = p.join(JoinArgs{Publish: true}).UUID // each join leaves the previous room
	}
	p.barrier()
	l.mu.Lock()
	n := len(l.rooms)
	l.mu.Unlock()
	if n > 2 {
		t.Fatalf("a listing nobody asked for holds %d rooms after 50 rooms came and went", n)
	}
	if got := discoverAll(t, q); !slices.Equal(got, []string{last}) {
		t.Fatalf("listed %v, want the room the peer is in, %s", got, last)
	}
}

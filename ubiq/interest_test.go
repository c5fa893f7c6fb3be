package ubiq

import (
	"fmt"
	"math"
	"math/rand/v2"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/xrealm/xrealm/interest"
)

// peersIn collects PeerAdded/PeerRemoved from ms into set.
func applyPeerEvents(t *testing.T, set map[string]bool, ms []msg) (removed []string) {
	t.Helper()
	for _, m := range ms {
		switch m.typ {
		case "PeerAdded":
			var a struct {
				Peer PeerInfo `json:"peer"`
			}
			m.decode(t, &a)
			set[a.Peer.UUID] = true
		case "PeerRemoved":
			var a struct {
				UUID string `json:"uuid"`
			}
			m.decode(t, &a)
			delete(set, a.UUID)
			removed = append(removed, a.UUID)
		}
	}
	return removed
}

func TestSetObservedAtomic(t *testing.T) {
	// No grace period: atomicity must come from the order of attachment.
	ts := startServer(t, nil, func(c *Config) { c.RemoveGrace = -1 })
	shard := [16]byte{1, 2, 3}
	var rooms []string
	var members []*peer
	for i := range 3 {
		id := interest.FormatUUID(interest.CellRoomID(shard, interest.Cell{Q: i, R: -i}))
		rooms = append(rooms, id)
		m := dialPeer(t, ts.tcp)
		m.join(JoinArgs{UUID: id})
		members = append(members, m)
	}
	o := dialPeer(t, ts.tcp)
	o.join(JoinArgs{UUID: newUUID()})
	visible := map[string]bool{}
	for step, set := range [][]int{{0, 1}, {1, 2}, {2}, {0, 1, 2}, {}} {
		var ids []string
		for _, i := range set {
			ids = append(ids, rooms[i])
		}
		before := map[string]bool{}
		for k := range visible {
			before[k] = true
		}
		o.request("SetObserved", SetObservedArgs{Rooms: ids})
		var ack ObservedArgs
		o.expect("Observed").decode(t, &ack)
		if len(ack.Rooms) != len(ids) {
			t.Fatalf("step %d: observed %v, want %v", step, ack.Rooms, ids)
		}
		removed := applyPeerEvents(t, visible, o.barrier())
		want := map[string]bool{}
		for _, i := range set {
			want[members[i].uuid] = true
		}
		if fmt.Sprint(visible) != fmt.Sprint(want) {
			t.Fatalf("step %d: visible %v, want %v", step, visible, want)
		}
		for _, r := range removed {
			if before[r] && want[r] {
				t.Fatalf("step %d: %s was removed although observed before and after", step, r)
			}
		}
		// Members of observed rooms reach the observer; others do not.
		for i, m := range members {
			m.c.Send(NetworkId{A: 900, B: uint32(i)}, []byte("cell"))
		}
		got := map[uint32]bool{}
		for _, m := range o.barrier() {
			if m.typ == "" {
				got[IDOf(m.frame).B] = true
			}
		}
		// Frames from other connections are not ordered with our Ping:
		// wait for the expected ones, then check nothing else came.
		for _, i := range set {
			for !got[uint32(i)] {
				got[IDOf(o.frame().frame).B] = true
			}
		}
		for b := range got {
			if !want[members[b].uuid] {
				t.Fatalf("step %d: observer got a frame from unobserved room %d", step, b)
			}
		}
	}
}

// TestMemberMovesBetweenObservedRooms checks that an observer of two
// rooms does not see a member that moves from one to the other disappear.
func TestMemberMovesBetweenObservedRooms(t *testing.T) {
	ts := startServer(t, nil, nil) // default grace
	a, b := newUUID(), newUUID()
	o := dialPeer(t, ts.tcp)
	o.request("SetObserved", SetObservedArgs{ClientID: o.clientID, Rooms: []string{a, b}})
	o.expect("Observed")
	x := dialPeer(t, ts.tcp)
	x.join(JoinArgs{UUID: a})
	o.expect("PeerAdded")
	for range 5 {
		x.join(JoinArgs{UUID: b})
		x.join(JoinArgs{UUID: a})
	}
	x.c.Send(NetworkId{A: 1, B: 1}, []byte("still here"))
	o.frame()
	time.Sleep(2 * ts.s.cfg.RemoveGrace) // let any pending removal fire
	ms := o.barrier()
	if n := countType(ms, "PeerRemoved"); n != 0 {
		t.Fatalf("observer saw the moving member removed %d times", n)
	}
}

// TestKNNInterest places peers at random and checks, against brute force,
// that each peer is told exactly about its k nearest and receives the
// frames of exactly those peers.
func TestKNNInterest(t *testing.T) {
	ts := startServer(t, nil, func(c *Config) { c.RemoveGrace = -1 })
	const n, k = 12, 3
	id := newUUID()
	rng := rand.New(rand.NewPCG(1, 2))
	ps := make([]*peer, n)
	pos := make([]interest.Vec3, n)
	for i := range ps {
		ps[i] = dialPeer(t, ts.tcp)
		pos[i] = interest.Vec3{X: rng.Float64() * 100, Z: rng.Float64() * 100}
	}
	ps[0].join(JoinArgs{UUID: id})
	ps[0].request("AppendRoomProperties", PropertiesArgs{Keys: []string{InterestKey}, Values: []string{`{"mode":"knn","k":3,"rate_hz":50,"hysteresis_ms":1}`}})
	ps[0].expect("RoomPropertiesAppended")
	for i, p := range ps {
		at := fmt.Sprintf("%g,0,%g", pos[i].X, pos[i].Z)
		if i%2 == 1 { // the position in the Join's own properties: it goes to the room joined
			p.join(JoinArgs{UUID: id, Peer: p.info([]string{PositionKey}, []string{at})})
			continue
		}
		if i > 0 {
			p.join(JoinArgs{UUID: id})
		}
		p.request("AppendPeerProperties", PropertiesArgs{Keys: []string{PositionKey}, Values: []string{at}})
	}
	byUUID := map[string]int{}
	for i, p := range ps {
		byUUID[p.uuid] = i
	}
	// Peers joined and moved one after the other, so sets changed on the
	// way; each converges to the brute-force k nearest.
	for i, p := range ps {
		want := bruteKNN(pos, i, k)
		got := map[string]bool{}
		deadline := time.Now().Add(10 * time.Second)
		for fmt.Sprint(sortedIdx(got, byUUID)) != fmt.Sprint(want) {
			if time.Now().After(deadline) {
				t.Fatalf("peer %d told about %v, want its %d nearest %v", i, sortedIdx(got, byUUID), k, want)
			}
			select {
			case m := <-p.in:
				applyPeerEvents(t, got, []msg{m})
			case <-time.After(100 * time.Millisecond):
			}
		}
	}
	// Frames follow the sets (asymmetric): j receives from i iff i is
	// among j's nearest.
	for i, p := range ps {
		p.c.Send(NetworkId{A: 4242, B: uint32(i)}, []byte("pose"))
	}
	for j, p := range ps {
		want := bruteKNN(pos, j, k)
		got := map[int]bool{}
		for len(got) < k {
			got[int(IDOf(p.frame().frame).B)] = true
		}
		for _, m := range p.barrier() {
			if m.typ == "" {
				got[int(IDOf(m.frame).B)] = true
			}
		}
		var gotIdx []int
		for i := range got {
			gotIdx = append(gotIdx, i)
		}
		sort.Ints(gotIdx)
		if fmt.Sprint(gotIdx) != fmt.Sprint(want) {
			t.Fatalf("peer %d received from %v, want %v", j, gotIdx, want)
		}
	}
}

// TestKNNHysteresis checks that a peer that leaves an observer's k nearest
// stays in its set for the hysteresis period.
func TestKNNHysteresis(t *testing.T) {
	ts := startServer(t, nil, func(c *Config) { c.RemoveGrace = -1 })
	id := newUUID()
	o, near, far, mover := dialPeer(t, ts.tcp), dialPeer(t, ts.tcp), dialPeer(t, ts.tcp), dialPeer(t, ts.tcp)
	o.join(JoinArgs{UUID: id})
	o.request("AppendRoomProperties", PropertiesArgs{Keys: []string{InterestKey}, Values: []string{`{"mode":"knn","k":1,"rate":50,"hysteresis_ms":60000}`}})
	o.expect("RoomPropertiesAppended")
	place := func(p *peer, x float64) {
		p.request("AppendPeerProperties", PropertiesArgs{Keys: []string{PositionKey}, Values: []string{fmt.Sprintf("%g,0,0", x)}})
	}
	place(o, 0)
	near.join(JoinArgs{UUID: id})
	place(near, 1)
	// Until its position is applied, near ranks after every positioned
	// peer: wait, so that far (below) does not displace it.
	eventually(t, "near's position applied", func() bool { return positioned(ts, id, near) })
	var a struct {
		Peer PeerInfo `json:"peer"`
	}
	o.expect("PeerAdded").decode(t, &a)
	if a.Peer.UUID != near.uuid {
		t.Fatalf("first nearest %s, want near", a.Peer.UUID)
	}
	// near moves away and mover comes closer: mover enters, near stays.
	far.join(JoinArgs{UUID: id})
	place(far, 1000)
	place(near, 500)
	mover.join(JoinArgs{UUID: id})
	place(mover, 0.5)
	o.expect("PeerAdded").decode(t, &a)
	if a.Peer.UUID != mover.uuid {
		t.Fatalf("entered %s, want mover", a.Peer.UUID)
	}
	near.c.Send(NetworkId{A: 3, B: 3}, []byte("still in the set"))
	if f := o.frame(); IDOf(f.frame) != (NetworkId{A: 3, B: 3}) {
		t.Fatalf("frame %v", IDOf(f.frame))
	}
	if n := countType(o.barrier(), "PeerRemoved"); n != 0 {
		t.Fatal("peer left the set before its hysteresis period")
	}
	// Leaving the room ends it at once.
	near.c.Close()
	o.expect("PeerRemoved")
}

func sortedIdx(set map[string]bool, byUUID map[string]int) []int {
	out := []int{}
	for u := range set {
		out = append(out, byUUID[u])
	}
	sort.Ints(out)
	return out
}

func bruteKNN(pos []interest.Vec3, i, k int) []int {
	idx := make([]int, 0, len(pos))
	for j := range pos {
		if j != i {
			idx = append(idx, j)
		}
	}
	d := func(j int) float64 { return math.Hypot(pos[j].X-pos[i].X, pos[j].Z-pos[i].Z) }
	sort.Slice(idx, func(a, b int) bool { return d(idx[a]) < d(idx[b]) })
	out := append([]int(nil), idx[:k]...)
	sort.Ints(out)
	return out
}

func TestParseInterest(t *testing.T) {
	for _, tc := range []struct {
		in      string
		mode    string
		k       int
		rate    float64
		wantErr string
	}{
		{"", "all", 0, 0, ""},
		{`{"mode":"all"}`, "all", 0, 0, ""},
		{`{"mode":"knn"}`, "knn", 20, 5, ""},
		{`{"mode":"knn","k":3,"rate_hz":50}`, "knn", 3, 50, ""},
		{`{"mode":"knn","rate":7}`, "knn", 20, 7, ""}, // the older name
		{`{"mode":"knn","rate_hz":1000}`, "knn", 20, 100, ""},
		{`{"mode":"knn","rate_hz":1e-11,"hysteresis_ms":1e13}`, "knn", 20, 0.1, ""}, // crashed the node's ticker
		{`{"mode":"grid"}`, "all", 0, 0, `mode must be knn or all, got "grid"`},
		{`{"mode":"knn",`, "all", 0, 0, "unexpected end of JSON"},
		{`{"mode":"knn","k":"x"}`, "all", 0, 0, "cannot unmarshal"},
	} {
		ic, err := parseInterest(tc.in)
		if tc.wantErr == "" && err != nil || tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)) {
			t.Errorf("%s: err %v, want %q", tc.in, err, tc.wantErr)
		}
		if ic.Mode != tc.mode || ic.Mode == "knn" && (ic.K != tc.k || ic.Rate != tc.rate) {
			t.Errorf("%s: %+v, want mode %s k %d rate %g", tc.in, ic, tc.mode, tc.k, tc.rate)
		}
	}
}

// positioned reports whether kNN room id on ts has applied p's position at
// its last recompute.
func positioned(ts *testServer, id string, p *peer) bool {
	r := ts.s.acquireActive(id)
	if r == nil {
		return false
	}
	defer ts.s.release(r)
	var ok bool
	r.do(func() { ok = r.knn != nil && r.knn.Positioned(p.uuid) })
	return ok
}

// tickRoom runs one interest recompute of room id now, as its ticker does.
func tickRoom(ts *testServer, id string) {
	r := ts.s.acquireActive(id)
	if r == nil {
		return
	}
	defer ts.s.release(r)
	r.do(func() { r.tick(time.Now()) })
}

// peerAddedUUID decodes a PeerAdded.
func peerAddedUUID(t *testing.T, m msg) string {
	t.Helper()
	var a struct {
		Peer PeerInfo `json:"peer"`
	}
	m.decode(t, &a)
	return a.Peer.UUID
}

// TestKNNPeerWithoutPosition is a new user's walkthrough: in a kNN room,
// only A reports a position. B, which never does (an unmodified Ubiq
// client), has no set and knows everyone; A's set has places free (k = 5),
// and B, ranked after every positioned peer, takes one. Both are told of
// the other and receive the other's frames.
func TestKNNPeerWithoutPosition(t *testing.T) {
	ts := startServer(t, nil, func(c *Config) { c.RemoveGrace = -1 })
	id := newUUID()
	a, b := dialPeer(t, ts.tcp), dialPeer(t, ts.tcp)
	a.join(JoinArgs{UUID: id})
	a.request("AppendRoomProperties", PropertiesArgs{Keys: []string{InterestKey}, Values: []string{`{"mode":"knn","k":5,"rate_hz":5}`}})
	a.expect("RoomPropertiesAppended")
	a.request("AppendPeerProperties", PropertiesArgs{Keys: []string{PositionKey}, Values: []string{"0,0,0"}})
	eventually(t, "A's position applied", func() bool { return positioned(ts, id, a) })
	b.join(JoinArgs{UUID: id})
	if u := peerAddedUUID(t, b.expect("PeerAdded")); u != a.uuid {
		t.Fatalf("B told of %s, want A", u)
	}
	if u := peerAddedUUID(t, a.expect("PeerAdded")); u != b.uuid {
		t.Fatalf("A told of %s, want B", u)
	}
	a.c.Send(NetworkId{A: 77, B: 1}, []byte("from A"))
	b.c.Send(NetworkId{A: 77, B: 2}, []byte("from B"))
	if f := b.frame(); IDOf(f.frame) != (NetworkId{A: 77, B: 1}) || string(f.frame[HeaderSize:]) != "from A" {
		t.Fatalf("B received %v %q", IDOf(f.frame), f.frame[HeaderSize:])
	}
	if f := a.frame(); IDOf(f.frame) != (NetworkId{A: 77, B: 2}) || string(f.frame[HeaderSize:]) != "from B" {
		t.Fatalf("A received %v %q", IDOf(f.frame), f.frame[HeaderSize:])
	}
	for _, p := range []*peer{a, b} {
		if n := countType(p.barrier(), "PeerRemoved"); n != 0 {
			t.Fatalf("peer %s: %d PeerRemoved", p.uuid[:8], n)
		}
	}
}

// TestKNNPeerWithoutPositionFullSets: where the positioned peers' sets are
// full, a peer without a position is in none of them, but still knows
// everyone and receives every frame; once it reports a position, it keeps
// only its own k nearest.
func TestKNNPeerWithoutPositionFullSets(t *testing.T) {
	ts := startServer(t, nil, func(c *Config) { c.RemoveGrace = -1 })
	id := newUUID()
	a, c, far, b := dialPeer(t, ts.tcp), dialPeer(t, ts.tcp), dialPeer(t, ts.tcp), dialPeer(t, ts.tcp)
	a.join(JoinArgs{UUID: id})
	a.request("AppendRoomProperties", PropertiesArgs{Keys: []string{InterestKey}, Values: []string{`{"mode":"knn","k":1,"rate_hz":50,"hysteresis_ms":1}`}})
	a.expect("RoomPropertiesAppended")
	for _, pp := range []struct {
		p   *peer
		pos string
	}{{a, "0,0,0"}, {c, "1,0,0"}, {far, "1000,0,0"}} {
		if pp.p != a {
			pp.p.join(JoinArgs{UUID: id})
		}
		pp.p.request("AppendPeerProperties", PropertiesArgs{Keys: []string{PositionKey}, Values: []string{pp.pos}})
		eventually(t, "position applied", func() bool { return positioned(ts, id, pp.p) })
	}
	b.join(JoinArgs{UUID: id})
	known := map[string]bool{}
	for len(known) < 3 {
		applyPeerEvents(t, known, []msg{b.expect("PeerAdded")})
	}
	if !known[a.uuid] || !known[c.uuid] || !known[far.uuid] {
		t.Fatalf("B knows %v, want a, c and far", known)
	}
	for i, p := range []*peer{a, c, far} {
		p.c.Send(NetworkId{A: 88, B: uint32(i)}, []byte("pose"))
	}
	got := map[uint32]bool{}
	for len(got) < 3 {
		got[IDOf(b.frame().frame).B] = true
	}
	// b's frames reach nobody: every positioned peer's set is full.
	b.c.Send(NetworkId{A: 88, B: 9}, []byte("unseen"))
	b.barrier() // the server has handled b's frame
	for range 3 {
		tickRoom(ts, id) // recomputes must not put b in a full set either
	}
	for _, p := range []*peer{a, c, far} {
		for _, m := range p.barrier() {
			if m.typ == "" && IDOf(m.frame) == (NetworkId{A: 88, B: 9}) {
				t.Fatalf("peer %s with a full set received b's frame", p.uuid[:8])
			}
			if m.typ == "PeerAdded" && peerAddedUUID(t, m) == b.uuid {
				t.Fatalf("peer %s with a full set was told of b", p.uuid[:8])
			}
		}
	}
	// b reports a position next to far: it now knows only far.
	b.request("AppendPeerProperties", PropertiesArgs{Keys: []string{PositionKey}, Values: []string{"1001,0,0"}})
	deadline := time.Now().Add(10 * time.Second)
	for len(known) != 1 || !known[far.uuid] {
		if time.Now().After(deadline) {
			t.Fatalf("B knows %v once positioned, want only far", known)
		}
		select {
		case m := <-b.in:
			applyPeerEvents(t, known, []msg{m})
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// Positions wait in a room for its next recompute. One whose peer is not a
// member (it left before the recompute, or its record never came) must not
// wait for good: once 65,536 had piled up the room would take no position
// at all, its members' included, and kNN sets would freeze. A member's
// leaving takes its position along, one that waits for no member is
// dropped after pendingPositionTTL, and a full room still takes its
// waiting peers' newer positions.
func TestPendingPositionsStayBounded(t *testing.T) {
	ts := startServer(t, nil, nil)
	id := newUUID()
	m, q := dialPeer(t, ts.tcp), dialPeer(t, ts.tcp)
	m.join(JoinArgs{UUID: id})
	// The slowest recompute (every 10 s): the test runs the recomputes.
	m.request("AppendRoomProperties", PropertiesArgs{Keys: []string{InterestKey}, Values: []string{`{"mode":"knn","k":3,"rate_hz":0.1}`}})
	m.expect("RoomPropertiesAppended")
	r := ts.s.acquireActive(id)
	if r == nil {
		t.Fatal("the room is not active")
	}
	defer ts.s.release(r)
	pending := func(id string) (interest.Vec3, bool) {
		r.posMu.Lock()
		defer r.posMu.Unlock()
		pp, ok := r.posNext[id]
		return pp.p, ok
	}
	waiting := func() int {
		r.posMu.Lock()
		defer r.posMu.Unlock()
		return len(r.posNext)
	}

	// A member that leaves takes its waiting position along.
	q.join(JoinArgs{UUID: id})
	q.request("AppendPeerProperties", PropertiesArgs{Keys: []string{PositionKey}, Values: []string{"1,0,1"}})
	q.barrier()
	q.c.Close()
	eventually(t, "the leaver's member key gone", func() bool { return countMembers(ts, id) == 1 })
	r.do(func() {}) // the room has seen the deletion
	if _, ok := pending(q.uuid); ok {
		t.Fatal("the position of a member that left still waits")
	}

	// A full room takes its waiting peers' newer positions, not new peers'.
	r.position(m.uuid, interest.Vec3{X: 1})
	for i := 0; waiting() < maxPendingPositions; i++ {
		r.position(fmt.Sprintf("ghost-%d", i), interest.Vec3{})
	}
	r.position(m.uuid, interest.Vec3{X: 2})
	r.position("one-more", interest.Vec3{})
	if p, _ := pending(m.uuid); p.X != 2 {
		t.Fatalf("a full room kept position %v of a waiting peer, want its newer one", p)
	}
	if _, ok := pending("one-more"); ok {
		t.Fatal("a full room took a new peer's position")
	}
	now := time.Now()
	var placed interest.Vec3
	r.do(func() { r.tick(now); placed = r.placed[m.uuid] })
	if placed.X != 2 {
		t.Fatalf("the member is placed at %v, want X=2", placed)
	}
	if n := waiting(); n != maxPendingPositions-1 {
		t.Fatalf("%d positions wait after a recompute, want the %d young ones of no member", n, maxPendingPositions-1)
	}
	// Those of no member go once they are older than pendingPositionTTL.
	r.do(func() { r.tick(now.Add(pendingPositionTTL + time.Second)) })
	if n := waiting(); n != 0 {
		t.Fatalf("%d positions of no member still wait after %v", n, pendingPositionTTL)
	}
}

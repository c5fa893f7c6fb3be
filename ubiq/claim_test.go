package ubiq

import (
	"context"
	"slices"
	"testing"
	"time"
)

// Peers A and B are members of one room on one node. A's count-out is
// written, but its answer is lost (a timeout after the store applied it),
// so the retrier applies it again. Before, a count-out decremented the
// node's count each time: the retry took B's place too, and with the count
// at zero the room's join code was freed while B was still in the room.
// Now a count-out removes its own claim id, and a repeat removes nothing.
func TestRetriedCountOutAppliedOnce(t *testing.T) {
	ts := startServer(t, nil, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st, node := ts.s.store, ts.s.node

	claimA := newClaimID()
	rec, err := st.claimRoom(ctx, newUUID(), "", "retried count-out", claimA, true)
	if err != nil {
		t.Fatal(err)
	}
	room := rec.UUID
	b := dialPeer(t, ts.tcp)
	if ri := b.join(JoinArgs{JoinCode: rec.JoinCode}); ri.UUID != room {
		t.Fatalf("B joined %s by code %s, want room %s", ri.UUID, rec.JoinCode, room)
	}
	r, _, err := st.getRoom(ctx, room)
	if err != nil {
		t.Fatal(err)
	}
	if got := r.Joined[node]; len(got) != 2 || got[0] != claimA {
		t.Fatalf("claims of node %s in room %s: %v, want A's (%s) and B's", node, room, got, claimA)
	}
	claimB := r.Joined[node][1]

	// A leaves: the write lands, then the retry runs it again.
	for try := range 2 {
		if err := st.unclaimRoom(ctx, room, rec.Gen, node, claimA); err != nil {
			t.Fatalf("count-out %d of A: %v", try+1, err)
		}
	}
	r, _, err = st.getRoom(ctx, room)
	if err != nil {
		t.Fatal(err)
	}
	if got := r.Joined[node]; !slices.Equal(got, []string{claimB}) {
		t.Fatalf("after A's count-out and its retry, claims of node %s: %v, want only B's %s", node, got, claimB)
	}
	if r.JoinCode != rec.JoinCode {
		t.Fatalf("room %s has join code %q while B is a member, want %q", room, r.JoinCode, rec.JoinCode)
	}
	if got, err := st.roomByCode(ctx, rec.JoinCode); err != nil || got != room {
		t.Fatalf("join code %s names room %q (err %v), want %s", rec.JoinCode, got, err, room)
	}
	// The code still leads to B's room.
	c := dialPeer(t, ts.tcp)
	if ri := c.join(JoinArgs{JoinCode: rec.JoinCode}); ri.UUID != room {
		t.Fatalf("C joined %s by code %s, want room %s", ri.UUID, rec.JoinCode, room)
	}

	// B's own count-out, twice, takes the code with the last claim.
	for try := range 2 {
		if err := st.unclaimRoom(ctx, room, rec.Gen, node, claimB); err != nil {
			t.Fatalf("count-out %d of B: %v", try+1, err)
		}
	}
	r, _, err = st.getRoom(ctx, room)
	if err != nil {
		t.Fatal(err)
	}
	if got := r.Joined[node]; len(got) != 1 || got[0] == claimB {
		t.Fatalf("after B's count-outs, claims of node %s: %v, want only C's", node, got)
	}
}

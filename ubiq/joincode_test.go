package ubiq

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/xrealm/xrealm/internal/testlog"
)

// codesInUse counts the join codes reserved in ts's bucket.
func codesInUse(t *testing.T, ts *testServer) int {
	t.Helper()
	keys, err := ts.s.store.listKeys(context.Background(), "c.*")
	if err != nil {
		t.Fatal(err)
	}
	return len(keys)
}

// Observing rooms takes no join code, and a room holds its code only while
// it has members: one connection that observes the most rooms it may and
// joins each of them in turn holds one code, not 65. (If every room
// created for observation reserved a code for as long as it was observed,
// about 720 connections could take all 46,656 codes.)
func TestObservedRoomsTakeNoJoinCode(t *testing.T) {
	ts := startServer(t, nil, nil)
	p := dialPeer(t, ts.tcp)
	rooms := make([]string, maxObserved)
	for i := range rooms {
		rooms[i] = newUUID()
	}
	p.request("SetObserved", SetObservedArgs{ClientID: p.clientID, Rooms: rooms})
	var obs ObservedArgs
	p.expect("Observed").decode(t, &obs)
	if len(obs.Rooms) != maxObserved {
		t.Fatalf("observing %d rooms of %d", len(obs.Rooms), maxObserved)
	}
	if n := codesInUse(t, ts); n != 0 {
		t.Fatalf("%d join codes reserved by rooms that are only observed", n)
	}
	var prev RoomInfo
	for i, id := range rooms[:8] {
		ri := p.join(JoinArgs{UUID: id, Name: "cell", Publish: true})
		if len(ri.JoinCode) != 3 || ri.UUID != id || ri.Name != "cell" || !ri.Publish {
			t.Fatalf("join %d: SetRoom %+v, want room %s named cell, published, with a join code", i, ri, id)
		}
		p.barrier() // the join, and leaving the room before, are done
		if n := codesInUse(t, ts); n != 1 {
			t.Fatalf("after join %d: %d join codes reserved, want 1 (the room joined)", i, n)
		}
		if i > 0 {
			// The room left is still observed, but has no member: its code
			// is gone, as Ubiq's server deletes a room its last peer leaves.
			q := dialPeer(t, ts.tcp)
			q.request("DiscoverRooms", DiscoverArgs{ClientID: q.clientID, JoinCode: prev.JoinCode})
			var found RoomsArgs
			q.expect("Rooms").decode(t, &found)
			if len(found.Rooms) != 0 && found.Rooms[0].UUID == prev.UUID {
				t.Fatalf("the code %s of a room without members still finds it: %+v", prev.JoinCode, found.Rooms)
			}
			q.request("DiscoverRooms", DiscoverArgs{ClientID: q.clientID})
			q.expect("Rooms").decode(t, &found)
			for _, r := range found.Rooms {
				if r.UUID == prev.UUID {
					t.Fatalf("published room %s without members is listed: %+v", prev.UUID, r)
				}
			}
			q.c.Close()
		}
		prev = ri
	}
	// A room with members keeps its code: another peer joins by it.
	q := dialPeer(t, ts.tcp)
	if ri := q.join(JoinArgs{JoinCode: prev.JoinCode}); ri.UUID != prev.UUID || ri.JoinCode != prev.JoinCode {
		t.Fatalf("join by code %s: SetRoom %+v, want room %s", prev.JoinCode, ri, prev.UUID)
	}
	p.expect("PeerAdded")
	// It keeps it while any member stays.
	p.join(JoinArgs{UUID: rooms[9]})
	p.barrier()
	if r, _, err := ts.s.store.getRoom(context.Background(), prev.UUID); err != nil || r.JoinCode != prev.JoinCode {
		t.Fatalf("room with a member left: %+v, %v; want join code %s", r, err, prev.JoinCode)
	}
	q.c.Close()
	eventually(t, "the last member's code to go", func() bool { return codesInUse(t, ts) == 1 })
}

// When no join code is free, a Join that needs one is refused with a
// reason that says so, and logged; joining a room that has a code, and
// observing, still work, and a code that comes free is taken again. The
// server draws codes from two here instead of 46,656.
func TestJoinCodesExhausted(t *testing.T) {
	var log testlog.Buffer
	ts := startServer(t, nil, func(c *Config) { c.Logger = log.Logger() })
	var n atomic.Uint32
	ts.s.store.newCode = func() string { return []string{"aaa", "aab"}[n.Add(1)%2] }

	a, b, c := dialPeer(t, ts.tcp), dialPeer(t, ts.tcp), dialPeer(t, ts.tcp)
	ra, rb := a.join(JoinArgs{Name: "A"}), b.join(JoinArgs{Name: "B"})
	if codes := ra.JoinCode + rb.JoinCode; codes != "aaaaab" && codes != "aabaaa" {
		t.Fatalf("join codes %q and %q", ra.JoinCode, rb.JoinCode)
	}
	c.request("Join", JoinArgs{Name: "C", Peer: c.info(nil, nil)})
	var rej RejectedArgs
	c.expect("Rejected").decode(t, &rej)
	if !strings.Contains(rej.Reason, "no free join code") || !strings.Contains(rej.Reason, "64 random codes were all in use") || rej.JoinArgs.Name != "C" {
		t.Fatalf("Rejected %+v, want the reason: no free join code", rej)
	}
	if log.Count("Ubiq join failed: no free join code", "peer="+c.uuid) != 1 {
		t.Fatalf("no log line for the refused join:\n%s", log.String())
	}
	if codesInUse(t, ts) != 2 {
		t.Fatal("a refused join changed the reserved codes")
	}

	// Observing needs no code; joining a room that has one needs none.
	id := newUUID()
	c.request("SetObserved", SetObservedArgs{ClientID: c.clientID, Rooms: []string{id}})
	var obs ObservedArgs
	c.expect("Observed").decode(t, &obs)
	if len(obs.Rooms) != 1 {
		t.Fatalf("observed %v with no code free, want %s", obs.Rooms, id)
	}
	if ri := c.join(JoinArgs{JoinCode: ra.JoinCode}); ri.UUID != ra.UUID {
		t.Fatalf("join by code %s reached %s, want %s", ra.JoinCode, ri.UUID, ra.UUID)
	}
	// The observed room is refused a code as well.
	c.request("Join", JoinArgs{UUID: id, Peer: c.info(nil, nil)})
	c.expect("Rejected")

	// B's room goes with B, and its code comes free.
	b.c.Close()
	eventually(t, "B's code to come free", func() bool { return codesInUse(t, ts) == 1 })
	if ri := c.join(JoinArgs{UUID: id}); ri.UUID != id || ri.JoinCode != rb.JoinCode {
		t.Fatalf("SetRoom %+v, want room %s with the freed code %s", ri, id, rb.JoinCode)
	}
}

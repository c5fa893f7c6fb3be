package ubiq

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/xrealm/xrealm/bus"
)

// TestRoomWatchRestarts: a room whose key watch ends (bus trouble) watches
// again and catches up on what it missed meanwhile: a member that joined
// on another node is added, one that left (its delete marker purged, as
// old ones are) is removed, and later changes keep coming.
func TestRoomWatchRestarts(t *testing.T) {
	bucket := fmt.Sprintf("ubiq-rewatch-%d", bucketSeq.Add(1))
	mod := func(c *Config) { c.Bucket = bucket }
	s1, s2 := startServer(t, nil, mod), startServer(t, nil, mod)
	entered, hold := make(chan string, 1), make(chan struct{})
	s1.s.beforeRewatch = func(room string) { entered <- room; <-hold }

	id := newUUID()
	a, c := dialPeer(t, s1.tcp), dialPeer(t, s2.tcp)
	a.join(JoinArgs{UUID: id})
	c.join(JoinArgs{UUID: id})
	var added struct {
		Peer PeerInfo `json:"peer"`
	}
	a.expect("PeerAdded").decode(t, &added)
	if added.Peer.UUID != c.uuid {
		t.Fatalf("a saw %s, want c %s", added.Peer.UUID, c.uuid)
	}

	// Node 1's watch of the room ends; its restart waits.
	s1.s.mu.Lock()
	r := s1.s.rooms[id]
	s1.s.mu.Unlock()
	r.do(func() { r.watcher.Stop() })
	select {
	case <-entered:
	case <-time.After(10 * time.Second):
		t.Fatal("the room did not watch again after its watch ended")
	}

	// Meanwhile c leaves and b joins, on node 2.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c.c.Close()
	eventually(t, "c's member key deleted", func() bool {
		_, err := s2.s.kv.Get(ctx, memberKey(id, c.uuid))
		return err != nil
	})
	if _, err := bus.PurgeOldDeleteMarkers(ctx, s2.s.store.js, s2.s.kv, 0); err != nil {
		t.Fatal(err)
	}
	b := dialPeer(t, s2.tcp)
	b.join(JoinArgs{UUID: id})
	close(hold)

	// a learns of both, in some order.
	got := map[string]string{}
	deadline := time.After(10 * time.Second)
	for len(got) < 2 {
		select {
		case m := <-a.in:
			switch m.typ {
			case "PeerAdded":
				m.decode(t, &added)
				got["PeerAdded"] = added.Peer.UUID
			case "PeerRemoved":
				var removed struct {
					UUID string `json:"uuid"`
				}
				m.decode(t, &removed)
				got["PeerRemoved"] = removed.UUID
			}
		case <-deadline:
			t.Fatalf("a was told %v after the room watched again, want PeerAdded b %s and PeerRemoved c %s", got, b.uuid, c.uuid)
		}
	}
	if got["PeerAdded"] != b.uuid || got["PeerRemoved"] != c.uuid {
		t.Fatalf("a was told %v, want PeerAdded b %s and PeerRemoved c %s", got, b.uuid, c.uuid)
	}
	// The new watch goes on: b's properties and frames reach a.
	b.request("AppendPeerProperties", PropertiesArgs{Keys: []string{"name"}, Values: []string{"bea"}})
	var upd PeerPropertiesArgs
	a.expect("PeerPropertiesAppended").decode(t, &upd)
	if upd.UUID != b.uuid || upd.Values[0] != "bea" {
		t.Fatalf("PeerPropertiesAppended %+v", upd)
	}
	b.c.Send(NetworkId{A: 5, B: 6}, []byte("after the watch"))
	if f := a.frame(); string(f.frame[HeaderSize:]) != "after the watch" {
		t.Fatalf("a got %q", f.frame[HeaderSize:])
	}
}

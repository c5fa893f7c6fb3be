package ubiq

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/xrealm/xrealm/bus"
	"github.com/xrealm/xrealm/internal/testnet"
)

// TestCrossNodeRoom runs two clustered buses on loopback with a Ubiq
// server on each: peers on different nodes share rooms.
func TestCrossNodeRoom(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster start-up")
	}
	ports := testnet.FreePorts(t, 4)
	addrs, natsAddrs := ports[:2], ports[2:]
	buses := make([]*bus.Bus, 2)
	var wg sync.WaitGroup
	errs := make([]error, 2)
	for i := range buses {
		wg.Add(1)
		go func() {
			defer wg.Done()
			buses[i], errs[i] = bus.Start(bus.Config{
				// Routing waits for a client listener: give each node one.
				DataDir: t.TempDir(), Name: fmt.Sprintf("n%d", i+1), Insecure: true, MaxPayload: 8 << 20, NATSAddr: natsAddrs[i],
				ClusterName: "ubiq-test", ClusterAddr: addrs[i], Routes: []string{"nats-route://" + addrs[1-i]},
			})
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(buses[i].Shutdown)
	}
	s1 := startServer(t, buses[0], func(c *Config) { c.Bucket = "ubiq-cluster" })
	s2 := startServer(t, buses[1], func(c *Config) { c.Bucket = "ubiq-cluster" })

	a, b := dialPeer(t, s1.tcp), dialPeer(t, s2.ws)
	id := newUUID()
	r := a.join(JoinArgs{UUID: id, Name: "shared"})
	rb := b.join(JoinArgs{JoinCode: r.JoinCode})
	if rb.UUID != id || rb.Name != "shared" {
		t.Fatalf("node 2 joined %+v, want %s", rb, id)
	}
	var added struct {
		Peer PeerInfo `json:"peer"`
	}
	a.expect("PeerAdded").decode(t, &added)
	if added.Peer.UUID != b.uuid {
		t.Fatalf("node 1 peer saw %s", added.Peer.UUID)
	}
	b.expect("PeerAdded").decode(t, &added)
	if added.Peer.UUID != a.uuid {
		t.Fatalf("node 2 peer saw %s", added.Peer.UUID)
	}
	// Frames both ways.
	a.c.Send(NetworkId{A: 1, B: 2}, []byte("from node 1"))
	if f := b.frame(); string(f.frame[HeaderSize:]) != "from node 1" {
		t.Fatalf("node 2 got %q", f.frame[HeaderSize:])
	}
	b.c.Send(NetworkId{A: 3, B: 4}, []byte("from node 2"))
	if f := a.frame(); string(f.frame[HeaderSize:]) != "from node 2" {
		t.Fatalf("node 1 got %q", f.frame[HeaderSize:])
	}
	// Properties: room properties reach both (echo included), peer
	// properties reach the other node.
	b.request("AppendRoomProperties", PropertiesArgs{Keys: []string{"colour"}, Values: []string{"blue"}})
	a.expect("RoomPropertiesAppended")
	b.expect("RoomPropertiesAppended")
	a.request("AppendPeerProperties", PropertiesArgs{Keys: []string{"name"}, Values: []string{"ann"}})
	var upd PeerPropertiesArgs
	b.expect("PeerPropertiesAppended").decode(t, &upd)
	if upd.UUID != a.uuid || upd.Values[0] != "ann" {
		t.Fatalf("PeerPropertiesAppended %+v", upd)
	}
	// A late joiner on node 2 gets everything in SetRoom and PeerAdded.
	c := dialPeer(t, s2.tcp)
	rc := c.join(JoinArgs{UUID: id})
	if v, _ := (&props{Keys: rc.Keys, Values: rc.Values}).get("colour"); v != "blue" {
		t.Fatalf("late joiner's room properties %v=%v", rc.Keys, rc.Values)
	}
	seen := map[string]bool{}
	for len(seen) < 2 {
		c.expect("PeerAdded").decode(t, &added)
		seen[added.Peer.UUID] = true
	}
	// Leaving on node 1 is seen on node 2.
	a.c.Close()
	var removed struct {
		UUID string `json:"uuid"`
	}
	b.expect("PeerRemoved").decode(t, &removed)
	if removed.UUID != a.uuid {
		t.Fatalf("PeerRemoved %s", removed.UUID)
	}
}

// TestDeadNodeMembersRemoved: a peer on node 2 is in a room with a peer on
// node 1; node 2 dies without cleaning up (its bus connection is cut, so
// neither its departures nor its heartbeats reach the bus). Node 1 must
// declare it dead, delete its member key and send PeerRemoved.
func TestDeadNodeMembersRemoved(t *testing.T) {
	bucket := fmt.Sprintf("ubiq-dead-%d", bucketSeq.Add(1))
	const hb, timeout = 100 * time.Millisecond, 600 * time.Millisecond
	mod := func(c *Config) { c.Bucket, c.NodeHeartbeat, c.NodeTimeout = bucket, hb, timeout }
	s1, s2 := startServer(t, nil, mod), startServer(t, nil, mod)

	a, b := dialPeer(t, s1.tcp), dialPeer(t, s2.tcp)
	id := newUUID()
	a.join(JoinArgs{UUID: id})
	b.join(JoinArgs{UUID: id})
	var added struct {
		Peer PeerInfo `json:"peer"`
	}
	a.expect("PeerAdded").decode(t, &added)
	if added.Peer.UUID != b.uuid {
		t.Fatalf("node 1 peer saw %s", added.Peer.UUID)
	}
	// While both nodes beat, nobody is swept, however long it takes.
	time.Sleep(3 * timeout)
	if ms := a.barrier(); countType(ms, "PeerRemoved") != 0 {
		t.Fatalf("a live node's peer was removed: %v", ms)
	}
	b.c.Send(NetworkId{A: 5, B: 6}, []byte("still here"))
	if f := a.frame(); string(f.frame[HeaderSize:]) != "still here" {
		t.Fatalf("node 1 got %q", f.frame[HeaderSize:])
	}

	// Node 2 crashes: its bus connection goes, then its peer.
	t0 := time.Now()
	s2.nc.Close()
	b.c.Close()
	var removed struct {
		UUID string `json:"uuid"`
	}
	a.expect("PeerRemoved").decode(t, &removed) // within expect's 10s bound
	if removed.UUID != b.uuid {
		t.Fatalf("PeerRemoved %s, want %s", removed.UUID, b.uuid)
	}
	t.Logf("PeerRemoved %v after node 2 died (heartbeat %v, timeout %v)", time.Since(t0), hb, timeout)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := s1.s.kv.Get(ctx, memberKey(id, b.uuid)); !errors.Is(err, jetstream.ErrKeyNotFound) {
		t.Fatalf("dead node's member key: %v, want not found", err)
	}
	eventually(t, "dead node's index and heartbeat gone", func() bool {
		keys, err := s1.s.store.listKeys(ctx, "e.>", "h.>")
		if err != nil {
			return false
		}
		for _, k := range keys {
			if strings.Contains(k, s2.s.node) {
				return false
			}
		}
		return true
	})
	// Its peer's count in the room's record went with it; the room keeps
	// its code for node 1's peer.
	eventually(t, "the dead node's count of members gone from the room", func() bool {
		r, _, err := s1.s.store.getRoom(ctx, id)
		return err == nil && len(r.Joined[s2.s.node]) == 0 && len(r.Joined[s1.s.node]) == 1 && r.JoinCode != ""
	})
	// Node 1's own peer is untouched and the room still works for it.
	if _, err := s1.s.kv.Get(ctx, memberKey(id, a.uuid)); err != nil {
		t.Fatalf("live peer's member key: %v", err)
	}
	c := dialPeer(t, s1.tcp)
	c.join(JoinArgs{UUID: id})
	c.expect("PeerAdded").decode(t, &added)
	if added.Peer.UUID != a.uuid {
		t.Fatalf("late joiner saw %s, want only %s", added.Peer.UUID, a.uuid)
	}
	if ms := c.barrier(); countType(ms, "PeerAdded") != 0 {
		t.Fatalf("late joiner saw more peers: %v", ms)
	}
}

// TestObserverOnOtherNodeKeepsRoom: observers have no keys of their own,
// so a room observed on node 1 must survive its last member leaving on
// node 2 (node 1's presence key holds it), and go once node 1 lets go.
func TestObserverOnOtherNodeKeepsRoom(t *testing.T) {
	bucket := fmt.Sprintf("ubiq-observe-%d", bucketSeq.Add(1))
	mod := func(c *Config) { c.Bucket = bucket }
	s1, s2 := startServer(t, nil, mod), startServer(t, nil, mod)
	ctx := context.Background()

	id := newUUID()
	o := dialPeer(t, s1.tcp)
	o.request("SetObserved", SetObservedArgs{ClientID: o.clientID, Rooms: []string{id}})
	o.expect("Observed")
	m := dialPeer(t, s2.tcp)
	m.join(JoinArgs{UUID: id})
	o.expect("PeerAdded")
	m.c.Close()
	o.expect("PeerRemoved")
	// Node 2 has tried to remove the room by now (it does so as its
	// member leaves); give a late attempt time too.
	time.Sleep(300 * time.Millisecond)
	if r, _, err := s2.s.store.getRoom(ctx, id); err != nil {
		t.Fatalf("room observed on node 1 was removed when node 2's member left: %v", err)
	} else if r.JoinCode != "" || len(r.Joined) != 0 {
		t.Fatalf("room observed on node 1 kept join code %q, members %v, after its last member left", r.JoinCode, r.Joined)
	}
	o.request("SetObserved", SetObservedArgs{ClientID: o.clientID, Rooms: []string{}})
	o.expect("Observed")
	eventually(t, "the room to be removed once nobody observes it", func() bool {
		_, _, err := s1.s.store.getRoom(ctx, id)
		return err != nil
	})
}
